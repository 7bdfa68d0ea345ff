"""Per-agent metrics of a step's matches: results, invalid moves, game length, Elo."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentinker_coordinator.protocol.matches import Match, MatchState

WIN, DRAW = "win", "draw"


@dataclass(frozen=True, kw_only=True)
class MatchRecord:
    """What the metrics need of one ended match."""

    lineup: tuple[tuple[str, str], ...]
    """(seat, agent_id) in turn order."""
    finished: bool
    """False: aborted (no result)."""
    rewards_by_seat: dict[str, float]
    outcomes_by_seat: dict[str, str]
    actions: tuple[tuple[str, bool], ...]
    """(seat, accepted) of every submitted action, in order."""

    @classmethod
    def of(cls, match: Match) -> "MatchRecord":
        lineup = tuple((seat, match.agents_by_seat.get(seat) or match.reserved_by_seat.get(seat, ""))
                       for seat in match.seats)
        return cls(lineup=lineup, finished=match.state is MatchState.FINISHED,
                   rewards_by_seat=dict(match.rewards_by_seat), outcomes_by_seat=dict(match.outcomes_by_seat),
                   actions=tuple((a.seat, a.accepted) for a in match.history))

    def seat_of(self, agent_id: str) -> str | None:
        return next((seat for seat, agent in self.lineup if agent == agent_id), None)

    def result(self) -> list[tuple[str, float]]:
        """(agent, final reward) per seat, for Elo."""
        return [(agent, self.rewards_by_seat.get(seat, 0.0)) for seat, agent in self.lineup]


def _rate(count: int, total: int) -> float:
    return count / total if total else 0.0


def agent_match_metrics(agent_id: str, records: Sequence[MatchRecord]) -> dict[str, float]:
    """match/{games, win_rate, draw_rate, loss_rate, win_rate/<seat>, invalid_move_rate,
    game_length, aborted} and head-to-head results of one agent over the matches it sat in."""
    mine = [(r, r.seat_of(agent_id)) for r in records if r.seat_of(agent_id) is not None]
    finished = [(r, seat) for r, seat in mine if r.finished]
    outcomes = [r.outcomes_by_seat.get(seat, "") for r, seat in finished]
    actions = [accepted for r, seat in mine for acting, accepted in r.actions if acting == seat]
    values = {
        "match/games": float(len(finished)),
        "match/aborted": float(len(mine) - len(finished)),
        "match/win_rate": _rate(outcomes.count(WIN), len(finished)),
        "match/draw_rate": _rate(outcomes.count(DRAW), len(finished)),
        "match/loss_rate": _rate(len(outcomes) - outcomes.count(WIN) - outcomes.count(DRAW), len(finished)),
        "match/invalid_move_rate": _rate(actions.count(False), len(actions)),
        "match/game_length": _rate(sum(sum(a for _, a in r.actions) for r, _ in finished), len(finished)),
    }
    for seat in dict.fromkeys(seat for _, seat in finished):
        in_seat = [r.outcomes_by_seat.get(s, "") for r, s in finished if s == seat]
        values[f"match/win_rate/{seat}"] = _rate(in_seat.count(WIN), len(in_seat))
    return values | head_to_head(agent_id, finished)


def head_to_head(agent_id: str, finished: Sequence[tuple[MatchRecord, str]]) -> dict[str, float]:
    """match/vs/<opponent>/{games, win_rate, draw_rate}: results against each other agent it met."""
    values: dict[str, float] = {}
    opponents = dict.fromkeys(agent for record, _ in finished for _, agent in record.lineup if agent != agent_id)
    for opponent in opponents:
        met = [record.outcomes_by_seat.get(seat, "") for record, seat in finished
               if any(agent == opponent for _, agent in record.lineup)]
        values[f"match/vs/{opponent}/games"] = float(len(met))
        values[f"match/vs/{opponent}/win_rate"] = _rate(met.count(WIN), len(met))
        values[f"match/vs/{opponent}/draw_rate"] = _rate(met.count(DRAW), len(met))
    return values
