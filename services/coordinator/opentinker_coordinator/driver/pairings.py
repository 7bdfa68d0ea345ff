"""Who plays whom: each step's matches of a multi-agent job, derived from (seed, step) alone.

Every agent's pipeline computes the same list, and opening a match is idempotent on its
request id, so whichever agent gets there first opens it and the others join the same match.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from opentinker_coordinator.driver.episodes import SEED_STRIDE


class Pairing(StrEnum):
    AUTO = "AUTO"
    """FIXED_SEATS when there are as many agents as seats, else ROUND_ROBIN."""
    FIXED_SEATS = "FIXED_SEATS"
    ROUND_ROBIN = "ROUND_ROBIN"


@dataclass(frozen=True, kw_only=True)
class PlannedMatch:
    request_id: str
    """Idempotency key of OpenMatch within the job's scope."""
    lineup: tuple[tuple[str, str], ...]
    """(seat, agent_id) in turn order."""
    reset_kwargs: dict
    seed: int
    """The game's reset seed (the same for every match of one problem)."""
    groups: dict[str, str]
    """Advantage group per seat: one problem, one lineup, one seat."""
    sampling_seeds: dict[str, int]
    """Per seat: the sampling seed of that seat's episode."""

    def seat_of(self, agent_id: str) -> str | None:
        return next((seat for seat, agent in self.lineup if agent == agent_id), None)


def lineups(agent_ids: Sequence[str], seats: Sequence[str], pairing: Pairing) -> list[tuple[str, ...]]:
    """Agents per seat for each pairing, in a fixed order."""
    if pairing is Pairing.AUTO:
        pairing = Pairing.FIXED_SEATS if len(agent_ids) == len(seats) else Pairing.ROUND_ROBIN
    if pairing is Pairing.FIXED_SEATS:
        if len(agent_ids) != len(seats):
            raise ValueError(f"FIXED_SEATS pairs {len(agent_ids)} agents with {len(seats)} seats "
                             f"({', '.join(seats)}); use ROUND_ROBIN or one agent per seat")
        return [tuple(agent_ids)]
    if len(agent_ids) < len(seats):
        raise ValueError(f"{len(agent_ids)} agents cannot fill the game's {len(seats)} seats "
                         f"({', '.join(seats)})")
    return list(itertools.permutations(agent_ids, len(seats)))


def step_matches(*, step: int, seed: int, seats: Sequence[str], lineup_list: Sequence[tuple[str, ...]],
                 batch_size: int, group_size: int) -> list[PlannedMatch]:
    """The matches of `step`: for each lineup, batch_size problems x group_size matches."""
    planned = []
    for lineup_index, agents in enumerate(lineup_list):
        for problem in range(batch_size):
            index = step * batch_size + problem
            for copy in range(group_size):
                key = f"step-{step}/lineup-{lineup_index}/problem-{problem}/match-{copy}"
                planned.append(PlannedMatch(
                    request_id=key, lineup=tuple(zip(seats, agents, strict=True)),
                    reset_kwargs={"index": index, "split": "train"}, seed=seed * SEED_STRIDE + index,
                    groups={seat: f"s{step}-l{lineup_index}-p{problem}-{seat}" for seat in seats},
                    sampling_seeds={seat: _seed(seed, key, seat) for seat in seats}))
    return planned


def _seed(seed: int, key: str, seat: str) -> int:
    """A stable 63-bit sampling seed per (job seed, match, seat); never 0 (0 = unseeded)."""
    digest = hashlib.sha256(f"{seed}/{key}/{seat}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1 or 1
