"""bench/rl_step_vs_trl.py end to end on a tiny configuration: our side on the shared stack,
TRL's side in-process when TRL (requirements/bench.txt, optional) is installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.stack import LocalStack
from tests._bench import load_bench

TINY = ["--model", "tiny-qwen2", "--batch-size", "2", "--group-size", "2", "--max-new-tokens", "3",
        "--steps", "2", "--warmup", "1", "--rounds", "1", "--threads", "1"]


def only_result(directory: Path) -> dict:
    [path] = directory.glob("rl_step_vs_trl-*.json")
    return json.loads(path.read_text())  # strict JSON: NaN would not parse back as a float


def check_side(side: dict, completions: int = 4) -> None:
    [run] = side["runs"]
    assert [s["step"] for s in run["steps"]] == [1, 2, 3]
    assert all(s["completions"] == completions for s in run["steps"])
    assert side["timed_steps"] == 2
    median = side["median"]
    assert median["wall_s"] > 0 and median["rollout_s"] > 0 and median["update_s"] > 0
    assert 0 < median["generated_tokens"] <= completions * 3


def test_our_side_times_steps_from_the_job_metrics(stack: LocalStack, tmp_path: Path, capsys):
    bench = load_bench("rl_step_vs_trl")
    assert bench.main([*TINY, "--skip-trl", "--scheduler", stack.address("scheduler"),
                       "--out", str(tmp_path)]) == 0
    result = only_result(tmp_path)
    check_side(result["ours"])
    assert result["ours"]["median"]["weight_sync_s"] > 0
    assert "trl" not in result and "ratio" not in result
    assert "ours" in capsys.readouterr().out


def test_trl_side_runs_grpo_trainer_on_the_same_problems(tmp_path: Path):
    pytest.importorskip("trl", reason="TRL is an optional bench dependency (requirements/bench.txt)")
    bench = load_bench("rl_step_vs_trl")
    assert bench.main([*TINY, "--skip-ours", "--out", str(tmp_path)]) == 0
    result = only_result(tmp_path)
    check_side(result["trl"])
    assert result["trl"]["runs"][0]["steps"][0]["wall_s"] is None  # no step end before the first
    assert result["trl_version"]
