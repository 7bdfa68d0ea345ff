"""bench/envhost.py end to end on a quick run: the EnvHost in both isolation modes and the echo
baseline (real processes) answer every step of every session over the Interact stream, and the
bench reports the ratios, process vs thread included. Behaviour only: timing is never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "envhost.py"
SESSIONS = 64  # the bench default
PROCESS_TARGETS = ("envhost", "envhost-async")


@pytest.mark.timeout(150)
def test_quick_bench_answers_every_step_on_both_servers(tmp_path: Path) -> None:
    out = tmp_path / "envhost.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENTINKER_")}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    result = json.loads(out.read_text())
    assert result["ok"] and result["problems"] == []
    assert result["config"]["sessions"] == SESSIONS
    targets = {"echo", "envhost", "envhost-thread", "envhost-async"}
    assert {run["target"] for run in result["runs"]} == targets
    for run in result["runs"]:
        assert run["sessions"] == SESSIONS
        assert run["steps"] > 0
        assert run["steps_answered"] == run["steps_sent"] > 0
        assert run["errors"] == []
        assert run["latency_ms"]["p50"] > 0
        # the process-isolated EnvHost's CPU includes its fork server and its game processes: the
        # bench's sessions share a job and the trivial games are fast, so they share few processes
        # (all 64 in one, unless a busy machine makes the calls look slower; and the warm processes
        # the other game's sessions left: both games share one EnvHost)
        if run["target"] in PROCESS_TARGETS:
            assert 1 + 1 + 1 <= run["server_processes"] <= 1 + 1 + 2 * 4
        else:
            assert run["server_processes"] == 1
    for target in targets:
        assert result["summary"][target]["steps_per_s"] > 0
    assert result["ratio"] > 0 and result["ratio"] == result["ratios"]["envhost"]
    # one round: the paired ratio is that round's envhost steps/s over its echo's
    by_target = {run["target"]: run["steps_per_s"] for run in result["runs"]}
    for target in targets - {"echo"}:
        assert result["round_ratios"][target] == [pytest.approx(by_target[target] / by_target["echo"])]
        assert result["ratios"][target] == pytest.approx(by_target[target] / by_target["echo"])
    isolation = result["isolation"]
    assert isolation["steps_per_s_process_over_thread"] == pytest.approx(
        result["summary"]["envhost"]["steps_per_s"] / result["summary"]["envhost-thread"]["steps_per_s"])
    assert isolation["server_cpu_us_per_step_process"] > 0 and isolation["server_cpu_us_per_step_thread"] > 0
    assert result["target"]["pass"] in (True, False)
    assert result["server_exit_codes"] == {"envhost": 0, "envhost-thread": 0, "echo": 0}  # all stopped gracefully
    assert "PASS" in done.stdout or "MISS" in done.stdout
    assert "isolation process/thread: steps/s" in done.stdout
    assert "later rounds (process mode: warm processes)" in done.stdout
