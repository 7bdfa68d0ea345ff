"""Every job spec the README tells a person to run learns within its run (issue 24).

The specs are found by parsing README.md for `opentinker run examples/jobs/<name>.yaml`, so a
spec the README starts to mention is covered here (and fails until it has a CI version below).
Each runs on the shared e2e stack as written except for `CI_VERSIONS[name].training`: fewer
steps and no evaluations or checkpoints along the way, the rest (model, seeds, game, sampling,
learning rate) untouched. Its headline metric must move the right way between the mean of the
first WINDOW steps and the mean of the last WINDOW steps, by at least the margin; every learning
agent of a multi-agent job must (a frozen one is not checked).

Measured on a 2-core CPU (docs/decisions.md, issue 24): the full math spec takes accuracy from
0.04 to 0.15 (eval accuracy 0 -> 0.25); gomoku self-play takes both agents' invalid-move rate
from about 0.86 to 0.34-0.43, and the learner against its frozen snapshot from 0.89 to 0.17.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient, ServiceClient
from opentinker.client.spec import load_job_spec

ROOT = Path(__file__).resolve().parents[2]
README_RUN = re.compile(r"opentinker run (examples/jobs/[\w.-]+\.ya?ml)")
WINDOW = 5


@dataclass(frozen=True, kw_only=True)
class CiVersion:
    """How CI shortens one README spec and what must have improved by its end."""

    training: dict[str, int]
    """Fields of `training` replaced for CI (the spec's own values otherwise)."""
    metric: str
    """The per-step metric that must improve (per learning agent in a multi-agent job)."""
    falls: bool = False
    """True: the metric must fall (e.g. the invalid-move rate); False: rise."""
    margin: float
    """By how much the last WINDOW steps' mean must beat the first WINDOW steps' mean."""


SHORT = {"eval_every_steps": 0, "checkpoint_every_steps": 0}
CI_VERSIONS = {
    "math_rl_from_scratch.yaml": CiVersion(training={"total_steps": 25, **SHORT}, metric="accuracy",
                                           margin=0.05),
    "gomoku_selfplay.yaml": CiVersion(training={"total_steps": 20, **SHORT},
                                      metric="match/invalid_move_rate", falls=True, margin=0.15),
    "gomoku_vs_snapshot.yaml": CiVersion(training={"total_steps": 20, **SHORT},
                                         metric="match/invalid_move_rate", falls=True, margin=0.15),
}


def readme_specs() -> list[str]:
    """The spec paths README.md tells a person to `opentinker run`, each once, in order."""
    return list(dict.fromkeys(README_RUN.findall((ROOT / "README.md").read_text())))


def ci_spec(path: str, version: CiVersion) -> job_pb2.JobSpec:
    spec = load_job_spec(ROOT / path)
    for field, value in version.training.items():
        setattr(spec.training, field, value)
    return spec


def improvement(values: list[float], falls: bool) -> float:
    """Mean of the last WINDOW values minus the first WINDOW's (negated when it should fall)."""
    first, last = sum(values[:WINDOW]) / WINDOW, sum(values[-WINDOW:]) / WINDOW
    return first - last if falls else last - first


def test_the_readme_names_the_quick_start_and_gomoku_specs():
    quick_start, gomoku = "examples/jobs/math_rl_from_scratch.yaml", "examples/jobs/gomoku_selfplay.yaml"
    assert {quick_start, gomoku} <= set(readme_specs())


def test_every_readme_spec_has_a_ci_version():
    missing = [path for path in readme_specs() if Path(path).name not in CI_VERSIONS]
    assert not missing, f"add a CI version (CI_VERSIONS) for {missing}"


def test_improvement_compares_the_first_and_last_windows():
    assert improvement([0.0] * 5 + [0.5] * 5, falls=False) == pytest.approx(0.5)
    assert improvement([0.9] * 5 + [0.4] * 5, falls=True) == pytest.approx(0.5)
    assert improvement([0.4] * 5 + [0.9] * 5, falls=True) == pytest.approx(-0.5)


@pytest.mark.timeout(300)  # gomoku self-play: 20 steps of 16 games each, ~2 min on a loaded 2-core CPU
@pytest.mark.parametrize("path", readme_specs(), ids=lambda path: Path(path).name)
def test_readme_spec_learns_within_its_run(stack, path: str):
    version = CI_VERSIONS[Path(path).name]
    spec = ci_spec(path, version)
    address = stack.address("scheduler")
    result = ServiceClient(address).follow(SchedulerClient(address).submit_job(spec).job_id)
    assert result.succeeded, result.job.status_message
    learners = [agent.agent_id for agent in spec.agents if not agent.frozen]
    curves = ({agent: [v for _, v in result.agent_series(agent, version.metric)] for agent in learners}
              if learners else {"policy": [v for _, v in result.series(version.metric)]})
    for agent, values in curves.items():
        assert len(values) == spec.training.total_steps, (agent, values)
        assert improvement(values, version.falls) >= version.margin, (
            f"{path} ({agent}): {version.metric} did not {'fall' if version.falls else 'rise'} "
            f"by {version.margin}: {[round(v, 3) for v in values]}")
