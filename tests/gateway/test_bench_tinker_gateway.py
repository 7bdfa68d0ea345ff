"""bench/tinker_gateway.py end to end on a quick run: the real tinker SDK through the gateway and our
gRPC primitives straight to the Trainer and Rollout do the same work on one private stack, and the
bench reports both sides' latencies and the ratios. Behaviour only: timing is never asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker", reason="the tinker SDK is a dev dependency (requirements/dev.txt)")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tinker_gateway.py"
SIDES = {"gateway", "grpc"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench-tinker-gateway") / "report.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENTINKER_")}
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=150, env=env)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-4000:]}"
    return json.loads(out.read_text()), done.stdout


@pytest.mark.timeout(180)
def test_quick_bench_reports_both_sides_and_the_ratios(quick_run) -> None:
    result, stdout = quick_run
    config = result["config"]
    assert config["quick"] and config["model"] == "tiny-llama"
    assert set(result["sides"]) == SIDES
    timed_steps, timed_samples = config["rounds"] * config["steps"], config["rounds"] * config["sample_calls"]
    for side in result["sides"].values():
        assert len(side["step_s"]) == timed_steps and len(side["sample_s"]) == timed_samples
        assert len(side["round_step_s"]) == len(side["round_sample_s"]) == config["rounds"]
        assert side["median_step_s"] > 0 and side["median_sample_s"] > 0
    for kind in ("step", "sample"):
        gateway, grpc = (result["sides"][name][f"median_{kind}_s"] for name in ("gateway", "grpc"))
        assert result["ratios"][kind] == pytest.approx(grpc / gateway)
        assert len(result["per_round_ratios"][kind]) == config["rounds"]
        assert result["verdicts"][kind] == ("PASS" if result["ratios"][kind] >= result["target"] else "MISS")
    assert result["target"] == 0.8
    assert "grpc/gateway step" in stdout and "grpc/gateway sample" in stdout
    assert ("PASS" in stdout) or ("MISS" in stdout)


@pytest.mark.timeout(180)
def test_both_sides_did_the_same_work(quick_run) -> None:
    result, _ = quick_run
    config = result["config"]
    gateway, grpc = result["sides"]["gateway"], result["sides"]["grpc"]
    assert result["same_work_problems"] == []
    steps = config["rounds"] * config["steps"]
    assert gateway["steps"] == grpc["steps"] == steps
    assert gateway["trained_tokens"] == grpc["trained_tokens"] == steps * config["sequences"] * config["tokens"]
    # warm-up and timed steps, one loss each, the same on both sides (same seed, data and optimizer)
    assert len(gateway["losses"]) == len(grpc["losses"]) == config["warmup"] + steps
    for side in (gateway, grpc):
        assert all(math.isfinite(loss) for loss in side["losses"])
        assert side["losses"][-1] < side["losses"][0]
    assert gateway["losses"] == pytest.approx(grpc["losses"], rel=1e-3)
    # every timed sample call returned completions of at most max_tokens tokens each
    for side in (gateway, grpc):
        assert len(side["sampled_tokens"]) == config["rounds"] * config["sample_calls"]
        assert all(0 < n <= config["num_samples"] * config["max_tokens"] for n in side["sampled_tokens"])
