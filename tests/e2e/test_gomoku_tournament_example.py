"""examples/gomoku_tournament.py on the shared stack: three policies, round robin, one job."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.stack import LocalStack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gomoku_tournament.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gomoku_tournament", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(180)
def test_three_agents_play_a_round_robin_through_the_coordinator(stack: LocalStack, tmp_path, capsys):
    example = load_example()
    config = example.parse_args(["--scheduler", stack.address("scheduler"), "--steps", "2", "--games", "1",
                                 "--out", str(tmp_path)])
    standings = example.run(config, api_key=stack.api_key)

    assert standings.succeeded, standings.message
    assert set(standings.elo) == {"ada", "bo", "cy"}
    assert sum(standings.elo.values()) == pytest.approx(3000.0)  # Elo is zero-sum across the three
    for agent, record in standings.record.items():
        # 6 ordered pairings of 3 agents over black/white, 1 match each: every agent sits in 4
        assert record["games"] == 4
        assert record["win_rate"] + record["draw_rate"] + record["loss_rate"] == pytest.approx(1.0)
        assert set(standings.head_to_head[agent]) == {"ada", "bo", "cy"} - {agent}
        assert len(standings.elo_curve[agent]) == 2
    for agent, opponent in (("ada", "bo"), ("ada", "cy"), ("bo", "cy")):
        assert standings.head_to_head[agent][opponent] + standings.head_to_head[opponent][agent] <= 1.0 + 1e-9
    printed = capsys.readouterr().out
    assert "step   2 |" in printed and "head to head" in printed and "(frozen)" in printed
    saved = json.loads((tmp_path / "standings.json").read_text())
    assert saved["job_id"] == standings.job_id and saved["elo"] == standings.elo
