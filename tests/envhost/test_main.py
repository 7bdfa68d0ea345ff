"""The EnvHost's plan: the manager built from settings and the idle-session reaper hook."""

from __future__ import annotations

import asyncio

from opentinker_runtime.core.server import HealthReporter
from opentinker_runtime.games.registry import builtin_games
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.game_hosts import ThreadHost, game_host
from opentinker_envhost.limits import Isolation, SessionLimits
from opentinker_envhost.main import build_plan, reaper, session_manager
from opentinker_envhost.sandbox import Sandbox
from opentinker_envhost.settings import EnvHostSettings


def test_settings_reach_the_manager() -> None:
    settings = EnvHostSettings(auth="disabled", max_sessions=3, call_timeout_seconds=2.5, session_ttl_seconds=9,
                               max_observation_chars=50, games="echo=tests.envhost.games:Echo",
                               isolation="thread", memory_limit_mb=64, cpu_seconds_per_call=2)
    manager = session_manager(settings)
    assert (manager.limits.max_sessions, manager.limits.call_timeout_s) == (3, 2.5)
    assert (manager.limits.idle_ttl_s, manager.limits.max_observation_chars) == (9, 50)
    assert (manager.limits.isolation, manager.limits.memory_limit_mb) == (Isolation.THREAD, 64)
    assert manager.limits.cpu_seconds_per_call == 2 and isinstance(manager.host, ThreadHost)
    assert isinstance(session_manager(EnvHostSettings(auth="disabled")).host, Sandbox)  # the default
    assert list(manager.catalog.specs) == sorted({"echo", *builtin_games()})


def test_plan_hosts_envhost_with_a_reaper_worker_registration_and_close_hooks() -> None:
    plan = asyncio.run(build_plan(EnvHostSettings(port=0, auth="disabled")))
    assert [binding.full_name for binding in plan.services] == ["opentinker.envhost.v1.EnvHostService"]
    # the games' fork server, the idle reaper, the scheduler registration and the heap's freeze
    # start; registration stops before sessions close (close_all also stops the fork server)
    assert [hook.__name__ for hook in plan.start_hooks] == ["start_sandbox", "reap_forever", "start",
                                                            "settle_heap_once_started"]
    assert [hook.__name__ for hook in plan.close_hooks] == ["stop", "close_all"]


def test_the_reaper_closes_idle_sessions_in_the_background() -> None:
    async def scenario() -> None:
        manager = session_manager(EnvHostSettings(auth="disabled", session_ttl_seconds=0.2))
        idle = await manager.open("math", {})
        reaping = asyncio.create_task(reaper(manager)(HealthReporter([])))
        await asyncio.sleep(0.5)
        assert idle.session_id not in manager.sessions
        fresh = await manager.open("math", {})
        await asyncio.sleep(0.1)
        assert fresh.session_id in manager.sessions
        reaping.cancel()
    asyncio.run(scenario())


def test_process_isolation_falls_back_to_threads_off_linux() -> None:
    limits = SessionLimits(isolation=Isolation.PROCESS)
    catalog = GameCatalog.from_setting("none")
    assert isinstance(game_host(catalog, limits, platform="darwin"), ThreadHost)
    assert isinstance(game_host(catalog, limits, platform="linux"), Sandbox)
