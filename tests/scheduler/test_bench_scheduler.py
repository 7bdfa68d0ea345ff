"""bench/scheduler.py end to end on a small run: every job is allocated, runs and succeeds, and
the bench counts the allocator's Redis round trips. Behaviour only: timing is never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scheduler.py"
JOBS = 60


@pytest.mark.timeout(180)
def test_quick_bench_allocates_runs_and_counts_every_job(tmp_path: Path):
    out = tmp_path / "scheduler.json"
    env = {**os.environ, "OPENTINKER_AUTH": "disabled"}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--jobs", str(JOBS), "--out", str(out)],
                          capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    result = json.loads(out.read_text())
    assert result["ok"] and result["problems"] == []
    assert result["config"]["jobs"] == JOBS
    assert result["baseline_ping_ms"]["p50"] > 0
    for name in ("devices_free", "saturated"):
        scenario = result["scenarios"][name]
        assert scenario["jobs"] == JOBS
        assert scenario["states"] == {"SUCCEEDED": JOBS}
        assert scenario["reached_running"] == JOBS  # start_time set and the RUNNING event seen
        assert scenario["allocations"] == JOBS
        assert scenario["submit_to_running_ms"]["n"] == JOBS
        assert scenario["allocator"]["round_trips"] > 0
        assert scenario["allocator"]["round_trips_per_allocation"] > 0
        assert scenario["allocator"]["breakdown"]
        assert scenario["rpc_round_trips"]["SubmitJob"] > 0
    assert result["scenarios"]["devices_free"]["client_submit_to_running_ms"]["n"] == JOBS
    finished = sum(w.get("finished", 0) for w in result["workers"] if w.get("role") == "coordinator")
    assert finished == 2 * JOBS  # the coordinators ended every job of both scenarios
    assert {t["pass"] for t in result["targets"].values()} <= {True, False}
    assert "PASS" in done.stdout or "MISS" in done.stdout
