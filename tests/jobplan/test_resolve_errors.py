"""A spec that cannot be resolved raises ResolveError naming the field's path."""

from __future__ import annotations

import math

import pytest

from opentinker_runtime.jobplan import ResolveError, resolve_job_plan
from tests.jobplan.specs import least_spec

BAD = [
    (least_spec("RL", **{"policy.algorithm.optimizer.learning_rate": 0.0}),
     "spec.policy.algorithm.optimizer.learning_rate", "must be > 0 for a training job"),
    (least_spec("RL", **{"training.batch_size": 0}), "spec.training.batch_size", "must be between 1 and 4096"),
    (least_spec("RL", **{"policy.sampling.temperature": math.nan}), "spec.policy.sampling.temperature",
     "must be a finite number"),
    (least_spec("RL", **{"policy.adaptation.lora.rank": 2000}), "spec.policy.adaptation.lora.rank",
     "must be at most 1024"),
    (least_spec("RL", **{"policy.algorithm.loss.importance_mask": 1,
                         "policy.algorithm.loss.importance_mask_high": 0.9}),
     "spec.policy.algorithm.loss.importance_mask_high", "must be >= 1"),
    (least_spec("MULTI_AGENT", **{"policy.algorithm.optimizer.learning_rate": 0.0}),
     "spec.agents[0].algorithm.optimizer.learning_rate", "must be > 0"),
    (least_spec("INFERENCE", **{"environment.env_name": ""}), "spec.environment.env_name", "must name an environment"),
    (least_spec("SESSION", **{"training.total_steps": 5}), "spec.training.total_steps",
     "must not be set for a SESSION job"),
    (least_spec("SFT", **{"dataset.path": ""}), "spec.dataset.path", "must be set for an SFT job"),
    (least_spec("RL", **{"policy.model.builtin.name": ""}), "spec.policy.model.builtin.name",
     "a builtin source needs"),
]


@pytest.mark.parametrize(("spec", "field", "words"), BAD, ids=[field for _, field, _ in BAD])
def test_a_resolve_error_names_the_field_path(spec, field: str, words: str) -> None:
    with pytest.raises(ResolveError) as raised:
        resolve_job_plan(spec)
    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ") and words in raised.value.message, str(raised.value)


def test_a_single_policy_marked_frozen_still_learns() -> None:
    plan = resolve_job_plan(least_spec("RL", **{"policy.frozen": True}))
    assert not plan.policy.frozen and plan.policy.optimizer is not None


def test_a_frozen_agent_needs_no_adaptation_nor_learning_rate_and_gets_no_optimizer() -> None:
    spec = least_spec("MULTI_AGENT")
    spec.agents[1].frozen = True
    spec.agents[1].ClearField("adaptation")
    spec.agents[1].algorithm.ClearField("optimizer")
    plan = resolve_job_plan(spec)
    assert plan.agents[1].frozen and plan.agents[1].optimizer is None and plan.agents[0].optimizer is not None
