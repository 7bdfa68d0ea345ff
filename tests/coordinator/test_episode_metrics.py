"""Per-batch episode metrics the Coordinator reports each step."""

import pytest

from opentinker_coordinator.driver.episode_metrics import episode_metrics
from opentinker_coordinator.types import StopReason, Trajectory


def episode(reward: float, stop: StopReason, correct: bool | None = None) -> Trajectory:
    return Trajectory(group_id="g", token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sampling_logprobs=[0.0] * 3,
                      total_reward=reward, stop_reason=stop, correct=correct)


def test_metrics_count_truncations_failures_and_verdicts():
    metrics = episode_metrics([episode(1.0, StopReason.DONE, True), episode(0.0, StopReason.MAX_TURN_TOKENS),
                               episode(0.0, StopReason.CONTEXT_LENGTH), episode(0.0, StopReason.ENV_ERROR),
                               episode(0.5, StopReason.MAX_TURNS, False)], prefix="eval/")
    assert metrics["eval/truncated"] == pytest.approx(2 / 5)
    assert metrics["eval/env_errors"] == 1.0
    assert metrics["eval/reward/mean"] == pytest.approx(1.5 / 4)  # failures are left out
    assert metrics["eval/accuracy"] == pytest.approx(0.5)
    assert metrics["eval/response_tokens/mean"] == 2.0


def test_a_batch_without_verdicts_reports_no_accuracy():
    metrics = episode_metrics([episode(0.0, StopReason.MAX_TOTAL_TOKENS)])
    assert metrics["truncated"] == 1.0 and "accuracy" not in metrics
