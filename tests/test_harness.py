"""The shared harness (harness/): stack specs, the pool of stacks by spec, the job spec factory,
and the import rules that keep tests/ and bench/ apart (they share harness/, which imports
neither; no module imports a test module)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness import job_specs
from harness.stack import LocalStack
from harness.stack_pool import StackPool, StackReplacedWarning
from harness.stack_spec import DEFAULT, StackSpec

ROOT = Path(__file__).resolve().parents[1]


class FakeStack:
    """What the pool uses of a LocalStack, with no process behind it."""

    def __init__(self, state_dir: Path, spec: StackSpec) -> None:
        self.state_dir, self.spec = state_dir, spec
        self.ups = self.downs = 0
        self.lost: list[str] = []

    def up(self, timeout: float = 120) -> None:
        self.ups += 1
        if self.spec.settings and dict(self.spec.settings).get("OPENTINKER_FAIL") == "1":
            raise RuntimeError("opentinker up failed")

    def down(self) -> None:
        self.downs += 1

    def gone(self) -> list[str]:
        return self.lost


@pytest.fixture
def pool(tmp_path: Path) -> StackPool:
    count = iter(range(1000))
    return StackPool(lambda name: tmp_path / f"{name}{next(count)}", stack_class=FakeStack)


GATEWAY = StackSpec.of(dashboard=False, gateway=True, OPENTINKER_TRAINER_CPU_SLOTS="4")


def test_specs_are_equal_and_hash_alike_whatever_the_order_of_their_settings() -> None:
    one = StackSpec.of(OPENTINKER_B="2", OPENTINKER_A="1")
    other = StackSpec(settings=(("OPENTINKER_A", "1"), ("OPENTINKER_B", "2")))
    assert one == other and hash(one) == hash(other) and one.settings == (("OPENTINKER_A", "1"), ("OPENTINKER_B", "2"))
    assert one != DEFAULT and DEFAULT.name == "default" and one.name == other.name != "default"
    with pytest.raises(ValueError, match="PYTHONPATH"):
        StackSpec.of(PYTHONPATH="/x")
    with pytest.raises(ValueError, match="named twice"):
        StackSpec(settings=(("OPENTINKER_A", "1"), ("OPENTINKER_A", "2")))


def test_a_stacks_environment_is_its_spec_not_the_test_processs_settings() -> None:
    base = {"PATH": "/bin", "OPENTINKER_API_KEY": "otk_caller", "OPENTINKER_TRAINER_CPU_SLOTS": "9",
            "PYTHONPATH": "/site"}
    spec = StackSpec.of(python_path=["/repo"], OPENTINKER_TRAINER_CPU_SLOTS="2")
    assert spec.environment(base) == {"PATH": "/bin", "OPENTINKER_TRAINER_CPU_SLOTS": "2",
                                      "PYTHONPATH": "/repo:/site"}
    assert DEFAULT.environment(base) == {"PATH": "/bin", "PYTHONPATH": "/site"}


def test_local_stack_hands_its_spec_to_opentinker_up_through_the_subprocess_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    class Done:
        returncode, stdout, stderr = 0, '{"processes": []}', ""

    monkeypatch.setattr("harness.stack._cli", lambda *args, **kwargs: calls.append((args, kwargs)) or Done())
    monkeypatch.setenv("OPENTINKER_ROLLOUT_CPU_SLOTS", "7")
    LocalStack(tmp_path, GATEWAY).up()
    (args, kwargs), = calls
    assert args[0] == "up" and "--no-dashboard" in args and "--gateway-port" in args
    assert kwargs["env"]["OPENTINKER_TRAINER_CPU_SLOTS"] == "4"
    assert "OPENTINKER_ROLLOUT_CPU_SLOTS" not in kwargs["env"]


def test_equal_specs_share_one_stack_and_other_specs_get_their_own(pool: StackPool) -> None:
    with pool.lease(DEFAULT) as first, pool.lease(StackSpec()) as again, pool.lease(GATEWAY) as gateway:
        assert first is again and gateway is not first
    with pool.lease(DEFAULT) as later:
        assert later is first
    assert first.ups == 1 and gateway.ups == 1
    assert pool.started == [(DEFAULT, "shared"), (GATEWAY, "shared")]


def test_idle_stacks_beyond_the_limit_stop_least_recently_used_first(pool: StackPool) -> None:
    third = StackSpec.of(OPENTINKER_X="1")
    with pool.lease(DEFAULT) as default:
        pass
    with pool.lease(GATEWAY) as gateway:
        assert default.downs == 0  # a leased stack never counts as idle
    assert default.downs == 1 and gateway.downs == 0  # two idle, one kept: the most recent
    with pool.lease(third):
        pass
    assert gateway.downs == 1
    with pool.lease(DEFAULT) as fresh:
        assert fresh is not default and fresh.ups == 1


def test_get_keeps_a_stack_until_close_and_private_stacks_are_never_shared(pool: StackPool) -> None:
    pinned = pool.get(GATEWAY)
    with pool.lease(DEFAULT), pool.lease(StackSpec.of(OPENTINKER_X="1")):
        pass
    assert pinned.downs == 0 and pool.get(GATEWAY) is pinned
    with pool.private(DEFAULT) as mine, pool.lease(DEFAULT) as shared:
        assert mine is not shared
    assert mine.downs == 1 and (DEFAULT, "private") in pool.started
    pool.close()
    assert pinned.downs == 1 and shared.downs == 1


def test_a_failed_start_is_remembered_and_a_broken_stack_is_replaced_only_when_nobody_holds_it(
        pool: StackPool) -> None:
    failing = StackSpec.of(OPENTINKER_FAIL="1")
    with pytest.raises(RuntimeError, match="up failed"):
        pool.get(failing)
    with pytest.raises(RuntimeError, match="failed to start earlier"):
        pool.get(failing)
    with pool.lease(DEFAULT) as broken:
        broken.lost = ["trainer"]
        with pytest.raises(RuntimeError, match="lost trainer while in use"), pool.lease(DEFAULT):
            pass
    with pytest.warns(StackReplacedWarning, match="lost trainer"), pool.lease(DEFAULT) as fresh:
        assert fresh is not broken and broken.downs == 1


def test_job_specs_are_fresh_dicts_and_none_leaves_a_training_field_out() -> None:
    first = job_specs.rl_spec(2)
    first["training"]["seed"] = 99
    first["policy"]["adaptation"]["lora"] = {}
    second = job_specs.rl_spec(2, checkpoint_every_steps=None, max_retries=1)
    assert second["training"] == {"total_steps": 2, "batch_size": 2, "group_size": 2, "eval_episodes": 4,
                                  "seed": 3, "max_retries": 1}
    assert second["policy"]["adaptation"] == {"full": {}}
    assert job_specs.sft_spec("d.jsonl")["dataset"] == {"path": "d.jsonl"}
    assert job_specs.inference_spec()["inference"] == {"num_episodes": 2, "output_path": ""}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("test_")}
    return names


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("folder, forbidden", [("bench", ("tests",)), ("harness", ("tests", "bench"))])
def test_bench_and_harness_import_no_test_code(folder: str, forbidden: tuple[str, ...]) -> None:
    found = [f"{path.relative_to(ROOT)}: {name}" for path in python_files(folder) for name in imports_of(path)
             if name.split(".")[0] in forbidden]
    assert found == []


def test_no_module_imports_a_test_module_or_a_bench() -> None:
    """Shared helpers live in a helper module (tests/<dir>/_x.py) or in harness/, never in a test_*.py."""
    found = [f"{path.relative_to(ROOT)}: {name}" for path in python_files("tests") for name in imports_of(path)
             if name.split(".")[0] == "bench" or (name.startswith("tests.") and ".test_" in name)]
    assert found == []


def test_multi_host_runs_in_parallel_processes_claim_different_subnets() -> None:
    """harness/netns.py: a subnet index is held by a lock until the run tears down; a second run
    takes the next free one, and asking for a held index fails rather than sharing it."""
    import os

    from harness.netns import claim_index

    first, first_lock = claim_index()
    second, second_lock = claim_index()
    try:
        assert first != second
        with pytest.raises(RuntimeError, match="held by another run"):
            claim_index(first)
        os.close(first_lock)
        again, again_lock = claim_index(first)  # free once its run let go
        assert again == first
        os.close(again_lock)
    finally:
        os.close(second_lock)


def test_the_chaos_job_has_room_for_the_steps_trained_through_a_fault() -> None:
    """harness/chaos/faults.py: a fault the job trains through (a Scheduler or EnvHost kill, a
    Redis restart) may be followed by a burst of late-reported steps, so it buys more steps than
    one that stops the job (a leased service's kill, a connection drop)."""
    from harness.chaos.faults import Fault, steps_for

    stopping = [Fault("kill", "trainer"), Fault("drop", "all")]
    assert steps_for(stopping) == 5 * 2 + 6
    assert steps_for([*stopping, Fault("kill", "scheduler"), Fault("redis", "redis")]) == 5 * 4 + 15 * 2 + 6
