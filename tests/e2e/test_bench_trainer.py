"""bench/trainer.py end to end in its quick form: a real Trainer process against in-process
sessions built from the same requests, steps and weight exports measured on both sides."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests._bench import load_bench

STEP_FLOOR = 0.6
"""gRPC over in-process step throughput. The target is 0.9; a 2-core machine shared with other
work swings single rounds by tens of percent, so the test only catches a gross regression
(e.g. a per-step copy of the model or a lost thread hop)."""
EXPORT_FLOOR = 0.05
"""ExportWeights over safetensors bytes/s. The target is 0.5; the Trainer reaches about 0.1-0.2 on
these sizes today (see the bench's report), so this floor catches an export that got several
times slower, not a missed target."""


@pytest.mark.timeout(300)
def test_the_quick_bench_measures_steps_and_exports_on_both_sides(tmp_path: Path, capsys):
    bench = load_bench("trainer")
    out = tmp_path / "trainer.json"
    assert bench.main(["--quick", "--threads", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    config = result["config"]

    steps = result["runs"]["step"]
    assert {(r["adaptation"], r["target"]) for r in steps} == {
        (a, t) for a in bench.ADAPTATIONS for t in bench.STEP_TARGETS}
    assert len(steps) == config["rounds"] * len(bench.ADAPTATIONS) * len(bench.STEP_TARGETS)
    for run in steps:
        assert run["steps"] == config["steps"] and run["seconds"] > 0
        assert run["tokens"] == config["steps"] * config["sequences"] * config["tokens"]
    for adaptation, losses in result["first_loss"].items():  # the same first step on both sides
        assert math.isclose(losses["grpc"], losses["in-process"], rel_tol=1e-4, abs_tol=1e-6), adaptation

    exports = result["runs"]["export"]
    assert len(exports) == config["export_rounds"] * len(bench.ADAPTATIONS) * len(bench.EXPORT_TARGETS)
    for adaptation in bench.ADAPTATIONS:
        verified = result["verified"][adaptation]
        assert verified["equal"] is True and verified["tensors"] > 0
        sizes = {r["bytes"] for r in exports if r["adaptation"] == adaptation}
        assert sizes == {verified["bytes"]}  # export and safetensors moved the same tensors
        assert all(r["seconds"] > 0 for r in exports if r["adaptation"] == adaptation)
    models = result["models"]
    assert 4_000_000 < models["export_parameters"] < 6_500_000  # the quick export model
    assert 0 < models["export_lora_trainable"] < models["export_parameters"] // 2
    assert result["verified"]["full"]["bytes"] >= 4 * models["export_parameters"]  # float32, tied head twice

    for table in (result["summary"]["step"], result["summary"]["export"]):
        for targets in table.values():
            for row in targets.values():
                assert all(value >= 0 for value in row.values())
                assert row.get("tokens_per_s", 1) > 0 and row.get("bytes_per_s", 1) > 0
    ratios = result["ratios"]
    assert set(ratios) == set(bench.TARGET_RATIOS) == set(result["meets_target"])
    for adaptation in bench.ADAPTATIONS:
        assert ratios[f"grpc_over_inprocess_step_{adaptation}"] >= STEP_FLOOR
        assert ratios[f"export_over_safetensors_{adaptation}"] >= EXPORT_FLOOR
    memory = result["memory"]  # the small-llama LoRA step with the Trainer's default budget
    assert memory["budget_source"] == "default" and memory["estimate"]["micro_batches"] >= 2
    assert memory["idle_resident_mb"] < memory["session_resident_mb"] < memory["peak_mb"]
    assert memory["step_memory_over_estimate"] <= 3.0  # the target is 2; the test catches a gross regression
    printed = capsys.readouterr().out
    assert all(name in printed for name in bench.TARGET_RATIOS) and "Trainer memory" in printed
