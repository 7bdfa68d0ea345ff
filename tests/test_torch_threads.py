"""torch's CPU threads per service: the `torch_threads` setting, its automatic default, and what
a Trainer or Rollout process (and a process it spawns) actually runs with."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from opentinker_runtime.core.embedded_redis import free_port
from opentinker_runtime.core.torch_threads import TorchThreads, resolve_torch_threads, usable_cpus
from tests._services import SERVICES, ServiceProcess

TRAINER, ROLLOUT = SERVICES[1], SERVICES[2]


def test_a_positive_setting_wins_over_omp_num_threads():
    assert resolve_torch_threads(3, environ={"OMP_NUM_THREADS": "8"}, cpus=16) == \
        TorchThreads(threads=3, source="setting")


def test_automatic_takes_omp_num_threads_when_the_operator_set_it():
    assert resolve_torch_threads(0, environ={"OMP_NUM_THREADS": " 6 "}, cpus=2) == \
        TorchThreads(threads=6, source="OMP_NUM_THREADS")


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 1), (16, 8)])
def test_automatic_takes_half_the_cpus_and_at_least_one(cpus: int, threads: int):
    for environ in ({}, {"OMP_NUM_THREADS": ""}, {"OMP_NUM_THREADS": "0"}, {"OMP_NUM_THREADS": "many"}):
        assert resolve_torch_threads(0, environ=environ, cpus=cpus) == \
            TorchThreads(threads=threads, source=f"half of {cpus} CPUs")


APPLY_AND_SPAWN = """
import multiprocessing, sys, torch
from opentinker_runtime.core.torch_threads import apply_torch_threads

def child(queue):
    queue.put(torch.get_num_threads())

if __name__ == "__main__":
    apply_torch_threads(int(sys.argv[1]), service="test")
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    print(torch.get_num_threads(), torch.get_num_interop_threads(), queue.get(timeout=60))
    process.join()
"""


def test_applying_sets_both_pools_and_spawned_children_inherit_the_count(tmp_path: Path):
    if usable_cpus() < 2:
        pytest.skip("with one CPU, 1 thread is also torch's own default")
    threads = 1  # torch's own default is one per CPU (capped there even when OMP_NUM_THREADS asks more)
    script = tmp_path / "apply_and_spawn.py"
    script.write_text(APPLY_AND_SPAWN)
    done = subprocess.run([sys.executable, str(script), str(threads)], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.splitlines()[-1].split() == [str(threads)] * 3  # after apply's log line


def _torch_threads_event(process: ServiceProcess) -> dict:
    for line in process.log_text().splitlines():
        event = json.loads(line) if line.startswith("{") else {}
        if event.get("event") == "torch_threads":
            return event
    raise AssertionError(f"no torch_threads log line:\n{process.log_text()}")


def test_trainer_and_rollout_apply_their_setting_at_start_and_log_it(tmp_path: Path):
    """Rollout: its setting beats OMP_NUM_THREADS; Trainer: automatic takes OMP_NUM_THREADS."""
    dead_scheduler = f"127.0.0.1:{free_port()}"
    rollout = ServiceProcess(ROLLOUT, port=free_port(), log_path=tmp_path / "rollout.log",
                             OPENTINKER_ROLLOUT_TORCH_THREADS="1", OMP_NUM_THREADS="2",
                             OPENTINKER_ROLLOUT_SCHEDULER_ADDRESS=dead_scheduler,
                             OPENTINKER_ROLLOUT_LOG_FORMAT="json")
    trainer = ServiceProcess(TRAINER, port=free_port(), log_path=tmp_path / "trainer.log",
                             OMP_NUM_THREADS="3", OPENTINKER_TRAINER_SCHEDULER_ADDRESS=dead_scheduler,
                             OPENTINKER_TRAINER_LOG_FORMAT="json")
    try:
        rollout.wait_for_health("SERVING", timeout=90)
        trainer.wait_for_health("SERVING", timeout=90)
        rollout_event, trainer_event = _torch_threads_event(rollout), _torch_threads_event(trainer)
    finally:
        rollout.kill()
        trainer.kill()
    assert (rollout_event["intra_op"], rollout_event["inter_op"], rollout_event["source"]) == (1, 1, "setting")
    assert (trainer_event["intra_op"], trainer_event["inter_op"], trainer_event["source"]) == \
        (3, 3, "OMP_NUM_THREADS")
