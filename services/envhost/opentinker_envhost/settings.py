"""Settings of the EnvHost service, read from OPENTINKER_ENVHOST_* variables."""

from dataclasses import dataclass
from typing import ClassVar

from opentinker_runtime.core.settings import ServiceSettings, address_setting, port_setting, setting
from opentinker_env import DEFAULT_MAX_OBSERVATION_CHARS
from opentinker_envhost.catalog import NO_USER_GAMES, check_games_setting
from opentinker_envhost.limits import Isolation


@dataclass(frozen=True, kw_only=True)
class EnvHostSettings(ServiceSettings):
    """EnvHost runs live environment sessions built from user AbstractGame classes."""

    ENV_PREFIX: ClassVar[str] = "OPENTINKER_ENVHOST_"

    port: int = port_setting(50054)
    scheduler_address: str = address_setting(
        "127.0.0.1:50051", "Scheduler this worker registers with and heartbeats to.")
    name: str = setting(
        "", "Name jobs give in EnvironmentReference.envhost to play on this EnvHost (registered with the "
        "Scheduler under the API key this EnvHost runs with: a tenant's key makes it that tenant's own). "
        "Empty: no name (jobs may still use its worker id).", optional=True)
    job_token_check: str = setting(
        "redis", "How calls' job tokens are checked (the services call EnvHosts with a job's token, never "
        "with their own key): redis = in the stack's Redis (the stack's own EnvHosts); scheduler = by asking "
        "the Scheduler (CheckJobToken) with this EnvHost's API key, for an EnvHost a tenant serves itself "
        "with no access to the stack's Redis: it then accepts only its tenant's jobs, and no API keys.",
        choices=("redis", "scheduler"))
    max_sessions: int = setting(
        256, "Most environment sessions this EnvHost keeps open at once.", min=1)
    games: str = setting(
        NO_USER_GAMES, "User games served besides the built-ins (math, math_tool, guess_number, gomoku), as comma-separated "
        "name=package.module:Class entries, e.g. mygame=mypkg.games:MyGame; each is imported "
        "and checked at start-up. 'none': built-ins only.", check=check_games_setting,
        type_name="name=module:Class,... or none")
    call_timeout_seconds: float = setting(
        30.0, "Longest a game's constructor, reset, step or close may run; past it the call "
        "fails with ENVIRONMENT_TIMEOUT and the session must be closed.", positive=True)
    session_ttl_seconds: float = setting(
        600.0, "A session without calls for this long is closed.", positive=True)
    unclaimed_session_ttl_seconds: float = setting(
        60.0, "A session that gets no call (Reset, Step or CloseSession) within this long of being "
        "opened is closed: its opener never learnt its id (an OpenSession cancelled, or past its "
        "deadline, just as the game was ready).", positive=True)
    max_observation_chars: int = setting(
        DEFAULT_MAX_OBSERVATION_CHARS, "Longest observation or prompt a game may return; "
        "a longer one fails the call with ENVIRONMENT_FAILED.", min=1)
    isolation: str = setting(
        Isolation.PROCESS.value, "Where game code runs: process (Linux only; elsewhere thread, with a "
        "warning) = games in processes (forked from a per-EnvHost fork server with the games preloaded; "
        "a job's sessions share them: sessions_per_process) under the memory "
        "and CPU-time limits below, killed when a call times out, without the OPENTINKER_* variables "
        "(the API key); thread = in the EnvHost process itself (worker threads, no limits, sees all "
        "of the EnvHost's memory and environment: for trusted games and benchmarks).",
        choices=tuple(mode.value for mode in Isolation))
    memory_limit_mb: int = setting(
        1024, "Process isolation: memory (address space) a game's process may allocate beyond what it "
        "maps when forked (in a kept process: when the session starts; a process holding more than 1/8 of "
        "it from earlier sessions is not kept); past it the game gets MemoryError and the session fails "
        "(ENVIRONMENT_FAILED).",
        min=16)
    cpu_seconds_per_call: float = setting(
        30.0, "Process isolation: CPU time one game call may use; past it the kernel ends the game's "
        "process and the session fails (ENVIRONMENT_FAILED). On a loaded machine it stops a busy game "
        "before call_timeout_seconds (wall clock) would.", positive=True)
    warm_processes: int = setting(
        128, "Process isolation: most idle game processes kept (in all) for the next session of the same "
        "tenant, job, job attempt, game and config, which then skips the fork: its game is built anew in "
        "the kept process. A process is kept only when its session ended cleanly (no call raised, timed "
        "out, crashed or hit a limit) and its game left no thread, child process or open file behind; "
        "sessions opened without a job never share a process. 0 = a new process for every session.", min=0)
    sessions_per_process: int = setting(
        64, "Process isolation: most sessions of one job (and attempt), game and config that share a game "
        "process. Their calls reach it in batches (one wake-up for many steps); each call keeps its CPU-time "
        "limit, and a session whose game crashes, hangs or hits a limit fails alone: the others are rebuilt "
        "in another process by replaying their episode (games must be deterministic for given reset "
        "arguments; one that is not fails with ENVIRONMENT_FAILED then). Fewer share when the game's calls "
        "are slower: as many as calls of its median duration fit in 5 ms (the rest move to other "
        "processes); a game whose calls take over 5 ms gets a process per session. Sessions opened without "
        "a job never share. 1 = a process per session.", min=1)
    warm_process_idle_seconds: float = setting(
        60.0, "Process isolation: a kept game process unused for this long is ended.", positive=True)
