"""Test tiers (a pytest plugin, loaded by pytest.ini): every test is in exactly one of

- `unit`: in one process (in-process gRPC servers and the session's redis-server allowed);
- `stack`: drives OpenTinker's real processes (a local stack, a service or the CLI as a subprocess);
- `chaos`: kills, cuts or floods those processes and checks that nothing is lost or leaked;

and may also be `slow` (about 20 s or more on a 2-core machine). A module says its tier with
`pytestmark = pytest.mark.<tier>` or by being listed in STACK_MODULES; without either, a module
under tests/chaos/ is `chaos`, under tests/e2e/ `stack`, a test that uses a stack fixture is
`stack`, and any other test is `unit`. A `unit` test that starts an
OpenTinker service process fails, naming the process: the tiers stay true.

    pytest -m "unit and not slow"    # the fast tier: seconds, no process started
    pytest -m "not (unit and not slow)"    # the rest, one after another (scripts/test.sh)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

TIERS = ("unit", "stack", "chaos")
STACK_FIXTURES = frozenset({"stack_pool", "gateway_stack", "security_stack", "local_stack"})
"""Fixtures that start (or hand out) a local stack; a module whose own fixtures do says so itself."""
STACK_MODULES = frozenset({
    "tests/test_stack.py", "tests/test_services_health.py", "tests/test_log_bounds.py", "tests/test_compose.py",
    "tests/docs/test_tutorial.py", "tests/client/test_reflection.py", "tests/client/test_cli_envhost_stack.py",
    "tests/envhost/test_process.py", "tests/envhost/test_cli.py", "tests/scheduler/test_crash_safety.py",
    "tests/dashboard/test_dashboard_signal_thread.py",
    "tests/dashboard/test_dashboard_units.py::test_the_cli_sub_command_serves_the_page_without_a_key_and_stops_on_sigterm",
    "tests/envhost/test_sandbox.py::test_no_game_process_outlives_its_envhost",
    "tests/test_torch_threads.py::test_trainer_and_rollout_apply_their_setting_at_start_and_log_it",
    # a benchmark's --quick run in a subprocess of its own (servers, stacks, a TRL baseline)
    "tests/envhost/test_bench_envhost.py", "tests/gateway/test_bench_tinker_gateway.py",
    "tests/scheduler/test_bench_scheduler.py", "tests/scheduler/test_load_regressions.py",
})
"""Modules (or `module::test` names) whose tests start OpenTinker processes without a stack fixture."""
SLOW_TESTS = frozenset({
    # measured at 10-33 s each on a busy 2-core machine: replica processes, plain-transformers reloads
    "tests/trainer/test_data_parallel.py", "tests/trainer/test_export_plain_loading.py",
    "tests/trainer/test_session_expiry.py::test_a_replaced_data_parallel_session_stops_its_replica_processes",
    "tests/trainer/test_tinker_losses.py::test_sum_over_two_replicas_equals_one_process",
    "tests/trainer/test_importance_mask.py::test_two_ranks_mask_like_one_process",
    "tests/trainer/test_servicer.py::test_the_server_answers_other_calls_while_a_forward_backward_runs",
    "tests/rollout/test_continuous_batching.py::test_requests_joining_mid_decoding_get_what_they_would_alone",
    "tests/test_torch_threads.py::test_applying_sets_both_pools_and_spawned_children_inherit_the_count",
})
"""Modules (or `module::test` names) that are `slow` without saying so themselves."""
DIRECTORY_TIERS = {"chaos": "chaos", "e2e": "stack"}
SERVICE_MODULES = ("opentinker_scheduler", "opentinker_trainer", "opentinker_rollout", "opentinker_envhost",
                   "opentinker_coordinator", "opentinker_gateway", "opentinker.dashboard")
CLI_STARTS = ("up", "envhost", "dashboard")
"""`opentinker` commands that start a service process."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: runs in one process (the fast tier)")
    config.addinivalue_line("markers", "stack: drives real OpenTinker processes (a stack, a service, the CLI)")
    config.addinivalue_line("markers", "chaos: kills, cuts or floods processes; nothing may be lost or leaked")
    config.addinivalue_line("markers", "slow: about 20 s or more on a 2-core machine")
    _guard_popen()


def listed(item: pytest.Item, names: frozenset[str]) -> bool:
    relative = item.path.relative_to(item.config.rootpath).as_posix()
    return relative in names or f"{relative}::{getattr(item, 'originalname', item.name)}" in names


def tier_of(item: pytest.Item) -> str:
    declared = [tier for tier in TIERS if item.get_closest_marker(tier)]
    if declared:
        return declared[0]
    if listed(item, STACK_MODULES):
        return "stack"
    directory = item.path.relative_to(item.config.rootpath).parts[1:2]
    if directory and directory[0] in DIRECTORY_TIERS:
        return DIRECTORY_TIERS[directory[0]]
    if STACK_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "stack"
    return "unit"


def shared_stack_group(item: pytest.Item) -> str | None:
    """The xdist group of a test on a pooled stack: `--dist loadgroup` runs a group on one worker,
    so each shared stack starts once per group, not once per worker. The default stack's users
    are two groups, the end-to-end jobs and the rest (dashboard, security, the Node client): two
    stacks, whose tests run side by side instead of one after another."""
    names = set(getattr(item, "fixturenames", ()))
    if "stack_pool" not in names:
        return None
    if "gateway_stack" in names:
        return "gateway-stack"
    return "default-stack-e2e" if "e2e" in item.path.parts else "default-stack"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
        if listed(item, SLOW_TESTS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        group = shared_stack_group(item)
        if group is not None and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


def started_service(args: object) -> str | None:
    """The OpenTinker service a Popen argv starts (`python -m <service>`, `opentinker up`), or None."""
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    for module in SERVICE_MODULES:
        if module in argv or any(a.startswith(f"{module}.") and a.endswith("main") for a in argv):
            return module
    cli = next((i for i, a in enumerate(argv) if a in ("opentinker.cli.main", "opentinker")
                or a.endswith("/opentinker")), None)
    command = argv[cli + 1] if cli is not None and cli + 1 < len(argv) else ""
    return f"opentinker {command}" if command in CLI_STARTS else None


_current: list[pytest.Item] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Know which test runs (its setup, call and teardown: fixtures of any scope start there)."""
    _current.append(item)
    try:
        yield
    finally:
        _current.pop()


def _guard_popen() -> None:
    original = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):  # noqa: ANN001, ANN202 - Popen's own signature
        item = _current[-1] if _current else None
        service = started_service(args) if item is not None and item.get_closest_marker("unit") else None
        if service is not None:
            raise RuntimeError(f"{item.nodeid} is a unit-tier test and started {service}: mark its "
                               "module `pytestmark = pytest.mark.stack` (tests/_tiers.py)")
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = guarded
