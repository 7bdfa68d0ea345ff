"""The bounds a SessionManager enforces on sessions and the games they run."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from opentinker_env import DEFAULT_MAX_OBSERVATION_CHARS


class Isolation(enum.StrEnum):
    """Where game code runs: a process per session (default) or the EnvHost's own threads."""

    PROCESS = "process"
    THREAD = "thread"


@dataclass(frozen=True, kw_only=True)
class SessionLimits:
    """Bounds the manager enforces."""

    max_sessions: int = 256
    call_timeout_s: float = 30.0
    """Longest a game constructor, reset, step or close may take."""
    idle_ttl_s: float = 600.0
    """A session untouched for this long is closed by `reap_idle`."""
    unclaimed_ttl_s: float = 60.0
    """A session that got no call since it was opened is closed by `reap_idle` after this long:
    its opener most likely never received its id (an OpenSession cancelled or past its deadline
    just as the game was ready). Every client resets a session right after opening it."""
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS
    isolation: Isolation = Isolation.PROCESS
    memory_limit_mb: int = 1024
    """Process isolation: memory a game process may allocate beyond what it maps when forked (a
    kept process: when the session starts)."""
    cpu_seconds_per_call: float = 30.0
    """Process isolation: CPU time one game call may use (user + system)."""
    warm_processes: int = 128
    """Process isolation: most idle game processes kept for the next session of the same owner
    (tenant, job, attempt), game and config (`sandbox_pool`); 0 = a new process per session."""
    sessions_per_process: int = 64
    """Process isolation: most sessions of one owner, game and config sharing a game process
    (`shared_placement`: fewer for a game with slower calls); 1 = a process per session."""
    warm_idle_s: float = 60.0
    """Process isolation: a kept process idle for this long is ended (by `reap_idle`)."""
