"""SubmitJob's check of a spec's env names against what the registered EnvHosts serve.

Each EnvHost publishes its games when it registers (the label of opentinker_runtime.core.envhost_catalog).
An EnvironmentReference is played on

- `envhost` (an id or name): the EnvHost that name resolves to for the job's tenant (its own
  first, then the stack's: opentinker_runtime.core.envhost_choice, the Coordinator's rule at run time);
- `envhost_address` (admin keys only): whatever listens there; the registered EnvHosts at that
  address, if any (the Scheduler never dials an address a spec names to ask it);
- neither: the stack's default EnvHost, one of the EnvHosts registered with an admin key.

The env name is refused (INVALID_ARGUMENT naming the known environments) only when that is
decided: some EnvHost is a candidate and every candidate published its games, and none serves
the name. Otherwise (no EnvHost registered yet: a stack starting up, an address nobody
registered, an EnvHost that does not publish its games) the job is queued, and if the name is
wrong its episodes fail with "no environment named ..." in the job's log and status. Only EnvHosts
the tenant may play on are candidates, so a refusal never lists another tenant's games.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from opentinker_runtime.core.envhost_catalog import served_environments
from opentinker_runtime.core.envhost_choice import SHARED_OWNER, EnvHostEntry, pick_envhost
from opentinker_scheduler.errors import InvalidArgument
from opentinker_scheduler.model import Caller, EnvironmentFacts, Role, Worker, WorkerState

MAX_LISTED = 50
"""Known environments a refusal lists (then "and N more")."""


@dataclass
class EnvHostSnapshot:
    """The EnvHosts as last read (by a SubmitJob's check, or an allocator pass that read the
    workers), so that SubmitJob checks env names without a Redis round trip of its own: it
    accepts on a recent snapshot, and refuses only what a fresh read confirms."""

    envhosts: list[Worker] | None = None
    read_ms: int = 0

    def saw(self, workers: Iterable[Worker], read_ms: int) -> None:
        self.envhosts = [w for w in workers if w.role is Role.ENVHOST and w.state is not WorkerState.DEAD]
        self.read_ms = read_ms

    def fresh(self, now_ms: int, max_age_ms: int) -> list[Worker] | None:
        """The EnvHosts if read less than `max_age_ms` ago, else None."""
        return self.envhosts if self.envhosts is not None and now_ms - self.read_ms < max_age_ms else None

    def forget(self) -> None:
        """An EnvHost registered here: the next check reads the EnvHosts again (so its games count
        at once; another replica's registration counts once that replica's snapshot is renewed)."""
        self.envhosts = None


def check_env_names(references: Iterable[EnvironmentFacts], workers: Sequence[Worker], caller: Caller) -> None:
    """InvalidArgument for the first reference whose env name its EnvHosts surely do not serve."""
    envhosts = [w for w in workers if w.role is Role.ENVHOST]
    for reference in references:
        if not reference.env_name:
            continue
        where, candidates = _candidates(reference, envhosts, caller.tenant_id)
        catalogs = [served_environments(w.labels) for w in candidates]
        if not catalogs or any(catalog is None for catalog in catalogs):
            continue  # undecided: the job-time error tells it, if the name is wrong
        known = sorted(set().union(*catalogs))
        if reference.env_name not in known:
            raise InvalidArgument(f"{reference.path}.env_name", _refusal(
                reference.env_name, where, known, default=not (reference.envhost or reference.envhost_address)))


def _candidates(reference: EnvironmentFacts, envhosts: Sequence[Worker], tenant_id: str) -> tuple[str, list[Worker]]:
    """(how the refusal names them, the EnvHosts the reference may be played on)."""
    if reference.envhost:
        entries = (EnvHostEntry(worker_id=w.worker_id, name=w.name, tenant_id=w.tenant_id, address=w.address,
                                alive=w.state is not WorkerState.DEAD) for w in envhosts)
        chosen = pick_envhost(entries, reference.envhost, tenant_id)
        named = [w for w in envhosts if chosen is not None and w.worker_id == chosen.worker_id]
        return f"on EnvHost {reference.envhost[:100]!r}", named
    if reference.envhost_address:
        return (f"on the EnvHost at {reference.envhost_address[:100]}",
                [w for w in envhosts if w.address == reference.envhost_address])
    return "on the registered EnvHosts", [w for w in envhosts if w.tenant_id == SHARED_OWNER]


def _refusal(env_name: str, where: str, known: Sequence[str], *, default: bool) -> str:
    listed = ", ".join(known[:MAX_LISTED]) + (f" and {len(known) - MAX_LISTED} more" if len(known) > MAX_LISTED else "")
    close = difflib.get_close_matches(env_name[:100], known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    own = ("; to play a game of your own, serve it with `opentinker envhost --game NAME=module:Class --name "
           "ENVHOST` and name that EnvHost in environment.envhost") if default else ""
    return f"no environment named {env_name[:100]!r} {where}{hint}; known: {listed or 'none'}{own}"
