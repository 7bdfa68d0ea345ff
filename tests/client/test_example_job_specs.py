"""Every YAML job spec under examples/jobs loads and passes the Scheduler's validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from opentinker.client.spec import load_job_spec
from opentinker_runtime.jobplan import resolve_job_plan

SPECS = sorted((Path(__file__).resolve().parents[2] / "examples" / "jobs").glob("*.yaml"))


def test_the_examples_include_the_multi_agent_jobs():
    assert {"gomoku_selfplay.yaml", "gomoku_vs_snapshot.yaml"} <= {path.name for path in SPECS}


@pytest.mark.parametrize("path", SPECS, ids=[path.name for path in SPECS])
def test_example_job_spec_is_valid(path: Path):
    spec = load_job_spec(path)
    resolve_job_plan(spec)  # the Scheduler's checks: every rule of the spec
    if path.name.startswith("gomoku"):
        assert len(spec.agents) == 2 and spec.environment.config["opponent"] == "none"
