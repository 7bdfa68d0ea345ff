"""The learning-rate schedule and optimizer/loss config validation."""

from __future__ import annotations

import pytest

from opentinker_trainer.config import LossConfig, LossFunction, LrSchedule, OptimizerConfig
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.optim import learning_rate_at


def rates(config: OptimizerConfig, steps: int) -> list[float]:
    return [round(learning_rate_at(config, step), 6) for step in range(steps)]


def test_warmup_then_constant() -> None:
    config = OptimizerConfig(learning_rate=1.0, warmup_steps=4)
    assert rates(config, 6) == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_linear_and_cosine_decay_to_zero_at_total_steps() -> None:
    linear = OptimizerConfig(learning_rate=1.0, warmup_steps=2, schedule=LrSchedule.LINEAR, total_steps=6)
    assert rates(linear, 8) == [0.5, 1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    cosine = OptimizerConfig(learning_rate=1.0, schedule=LrSchedule.COSINE, total_steps=4)
    assert rates(cosine, 5) == [1.0, 0.853553, 0.5, 0.146447, 0.0]


@pytest.mark.parametrize("schedule", [LrSchedule.LINEAR, LrSchedule.COSINE])
def test_decay_needs_total_steps_beyond_the_warmup(schedule) -> None:
    with pytest.raises(ValidationError, match="optimizer.total_steps: the .* schedule decays to 0"):
        OptimizerConfig(learning_rate=0.1, schedule=schedule)
    with pytest.raises(ValidationError, match=r"must be > warmup_steps \(4\); got 4"):
        OptimizerConfig(learning_rate=0.1, schedule=schedule, warmup_steps=4, total_steps=4)
    assert rates(OptimizerConfig(learning_rate=0.1, total_steps=0), 3) == [0.1] * 3


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"learning_rate": 0.0}, "optimizer.learning_rate"),
    ({"learning_rate": float("nan")}, "optimizer.learning_rate"),
    ({"learning_rate": 1.0, "beta2": 1.0}, "optimizer.beta2"),
    ({"learning_rate": 1.0, "max_grad_norm": -1.0}, "optimizer.max_grad_norm"),
    ({"learning_rate": 1.0, "warmup_steps": -1}, "optimizer.warmup_steps"),
])
def test_bad_optimizer_fields(kwargs, field) -> None:
    with pytest.raises(ValidationError) as raised:
        OptimizerConfig(**kwargs)
    assert raised.value.field == field


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"function": LossFunction.PPO_CLIP, "clip_low": 0.0}, "loss.clip_low"),
    ({"function": LossFunction.PPO_CLIP, "clip_high": 0.0}, "loss.clip_high"),
    ({"function": LossFunction.DUAL_CLIP, "dual_clip_c": 1.0}, "loss.dual_clip_c"),
    ({"function": LossFunction.TRUNCATED_IS, "truncation_cap": 0.0}, "loss.truncation_cap"),
    ({"function": LossFunction.CROSS_ENTROPY, "temperature": 0.0}, "loss.temperature"),
    ({"function": LossFunction.CROSS_ENTROPY, "kl_coef": -0.1}, "loss.kl_coef"),
])
def test_bad_loss_fields(kwargs, field) -> None:
    with pytest.raises(ValidationError) as raised:
        LossConfig(**kwargs)
    assert raised.value.field == field
