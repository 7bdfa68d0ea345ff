"""Global barriers of a multi-agent job: no agent passes (phase, step) until all have arrived.

Barriers are ordered by (step, phase) with phases ROLLOUT < UPDATE < WEIGHT_SYNC, and each
agent passes them in that order: arriving again at the barrier it last arrived at is a retry
(answered as before); arriving at an earlier one is `BarrierOutOfOrder`; arriving at a later one
directly (skipping a phase it has nothing to do in) counts as arriving at those it skipped. So
"no agent starts update k before every agent finished rollout k" and "no agent starts rollout
k+1 before every agent finished update k and its weight sync" hold for any agent that arrives
after each phase it runs.

The job's agents are fixed when a driver registers the job; for a job only seen through
matches (agents run by outside clients), they are the agents that joined its matches or
arrived at its barriers. An agent declared lost breaks every barrier not yet open: agents
waiting there (and arriving later) get `AgentLost` at once instead of waiting forever.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from opentinker_coordinator.protocol.protocol_errors import (
    AgentLost,
    BarrierOutOfOrder,
    BarrierTimeout,
    InvalidProtocolRequest,
)

PHASES = ("ROLLOUT", "UPDATE", "WEIGHT_SYNC")


@dataclass(frozen=True, order=True)
class BarrierKey:
    step: int
    phase_rank: int

    @classmethod
    def of(cls, phase: str, step: int) -> "BarrierKey":
        if phase not in PHASES:
            raise InvalidProtocolRequest(f"phase: barriers are at the end of {', '.join(PHASES)}, not {phase!r}")
        if step < 0:
            raise InvalidProtocolRequest(f"step: must be >= 0, got {step}")
        return cls(step, PHASES.index(phase))

    def __str__(self) -> str:
        return f"({PHASES[self.phase_rank]}, {self.step})"


@dataclass(frozen=True, kw_only=True)
class Arrival:
    arrived: int
    expected: int


@dataclass(kw_only=True)
class JobBarriers:
    job_id: str
    members: set[str] = field(default_factory=set)
    fixed: bool = False
    """True when a driver declared the agents; else members grow as agents show up."""
    arrivals: dict[BarrierKey, set[str]] = field(default_factory=dict)
    opened: set[BarrierKey] = field(default_factory=set)
    last: dict[str, BarrierKey] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add_member(self, agent_id: str) -> None:
        if not self.fixed:
            self.members.add(agent_id)

    async def arrive(self, agent_id: str, phase: str, step: int, *, timeout_s: float | None) -> Arrival:
        """Wait until every agent arrived at (phase, step); `BarrierTimeout` after `timeout_s`."""
        key = BarrierKey.of(phase, step)
        self._register(agent_id, key)
        try:
            async with asyncio.timeout(timeout_s):
                return await self._wait_open(key)
        except TimeoutError:
            missing = sorted(self.members - self._arrived(key))
            raise BarrierTimeout(f"barrier {key} of job {self.job_id}: still waiting for "
                                 f"{', '.join(missing)} after {timeout_s:g} s") from None

    def lose(self, agent_id: str, reason: str) -> None:
        self.lost[agent_id] = reason
        self._touch()

    def _register(self, agent_id: str, key: BarrierKey) -> None:
        if not agent_id:
            raise InvalidProtocolRequest("agent_id: is required")
        if self.fixed and agent_id not in self.members:
            raise InvalidProtocolRequest(f"agent_id: {agent_id!r} is not an agent of job {self.job_id} "
                                         f"(agents: {', '.join(sorted(self.members))})")
        previous = self.last.get(agent_id)
        if previous is not None and key < previous:
            raise BarrierOutOfOrder(f"agent {agent_id!r} already arrived at barrier {previous}; "
                                    f"{key} comes before it")
        self.members.add(agent_id)
        self.last[agent_id] = key
        self.arrivals.setdefault(key, set()).add(agent_id)
        self._touch()

    async def _wait_open(self, key: BarrierKey) -> Arrival:
        while True:
            changed = self._changed
            arrived = self._arrived(key)
            if key in self.opened or self.members <= arrived:
                self.opened.add(key)
                return Arrival(arrived=len(arrived), expected=len(self.members))
            if self.lost:
                who = ", ".join(f"{agent} ({why})" for agent, why in sorted(self.lost.items()))
                raise AgentLost(f"barrier {key} of job {self.job_id} cannot open: lost {who}")
            await changed.wait()

    def _arrived(self, key: BarrierKey) -> set[str]:
        """Agents at `key` or past it: one that arrived at a later barrier (skipping a phase it had
        nothing to do in) finished this phase too, so the others must not wait for it here."""
        return self.arrivals.get(key, set()) | {agent for agent, last in self.last.items() if last > key}

    def _touch(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
