"""bench/rollout.py end to end in its quick form: real Rollout and EnvHost processes against
the in-process loops, every target playing the same game to the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._bench import load_bench


@pytest.mark.timeout(300)
def test_the_quick_bench_plays_every_target_and_concurrency_beats_one_at_a_time(tmp_path: Path):
    bench = load_bench("rollout")
    out = tmp_path / "rollout.json"
    assert bench.main(["--quick", "--turns", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    runs = result["runs"]
    targets = {(run["scenario"], run["target"]) for run in runs}
    assert targets == {(scenario, target) for scenario, names in bench.TARGETS.items() for target in names}
    for run in runs:
        expected = 16 if run["target"] != "one-at-a-time" else 4
        assert run["episodes"] == expected
        # each episode lasts 2 turns unless an action ran into the token limit (then 1)
        assert run["episodes"] <= run["turns"] <= 2 * run["episodes"]
        assert run["generated_tokens"] >= run["turns"]
    for row in (row for scenario in result["summary"].values() for row in scenario.values()):
        assert 1 <= row["tokens_per_action"] <= 48
    # 16 episodes overlapping their 50 ms environment steps against one episode at a time
    assert result["ratios"]["slow_episodes_service_over_one_at_a_time"] >= 2.0
