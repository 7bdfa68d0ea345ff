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
    # over the 4 episodes the environment did not fail: the 2 cut off were never judged, so wrong
    assert metrics["eval/accuracy"] == pytest.approx(1 / 4)
    assert metrics["eval/judged"] == pytest.approx(2 / 4)
    assert metrics["eval/response_tokens/mean"] == 2.0


def test_cutting_replies_off_cannot_raise_accuracy():
    judged = [episode(1.0, StopReason.DONE, True), episode(0.0, StopReason.DONE, False)]
    cut = [episode(0.0, StopReason.MAX_TURN_TOKENS) for _ in range(6)]
    assert episode_metrics(judged)["accuracy"] == pytest.approx(0.5)
    with_cut = episode_metrics([*judged, *cut])
    assert with_cut["accuracy"] == pytest.approx(1 / 8) and with_cut["truncated"] == pytest.approx(6 / 8)
    assert with_cut["judged"] == pytest.approx(2 / 8)


def test_a_batch_without_verdicts_reports_no_accuracy():
    metrics = episode_metrics([episode(0.0, StopReason.MAX_TOTAL_TOKENS)])
    assert metrics["truncated"] == 1.0 and "accuracy" not in metrics


def test_a_game_judged_cut_action_counts_as_truncated():
    judged = Trajectory(group_id="g", token_ids=[1, 2], loss_mask=[0, 1], sampling_logprobs=[0.0] * 2,
                        total_reward=-1.0, stop_reason=StopReason.DONE, truncated_turns=1)
    assert episode_metrics([judged, episode(1.0, StopReason.DONE)])["truncated"] == 0.5


def with_info(*infos: dict, stop: StopReason = StopReason.DONE) -> Trajectory:
    from opentinker_coordinator.env_values import numeric_info_values
    return Trajectory(group_id="g", token_ids=[1], loss_mask=[1], sampling_logprobs=[0.0], total_reward=0.0,
                      stop_reason=stop, env_values=numeric_info_values(infos))


def test_numeric_info_values_become_env_metrics_averaged_over_the_batchs_turns():
    metrics = episode_metrics([
        with_info({"illegal": True, "margin": 3, "name": "x"}, {"illegal": False, "win": 1}),
        with_info({"illegal": False, "margin": -1.5, "nested": {"a": 1}}),
        with_info({"win": 0.0, "margin": 100.0}, stop=StopReason.ENV_ERROR),  # failed: left out
    ])
    assert metrics["env/illegal"] == pytest.approx(1 / 3)
    assert metrics["env/margin"] == pytest.approx((3 - 1.5) / 2)
    assert metrics["env/win"] == 1.0
    assert not {"env/name", "env/nested"} & set(metrics)


def test_untrusted_info_keys_cannot_flood_or_garble_the_metrics():
    from opentinker_coordinator.env_values import MAX_KEYS
    many = {f"k{i}": i for i in range(MAX_KEYS * 3)}
    odd = {"bad key": 1, "x" * 65: 1, "nan": float("nan"), "inf": float("inf"), "ok": 2}
    metrics = episode_metrics([with_info(many), with_info(odd), with_info({f"z{i}": 1 for i in range(50)})])
    env_keys = [key for key in metrics if key.startswith("env/")]
    assert len(env_keys) == MAX_KEYS
    assert "env/bad key" not in metrics and "env/nan" not in metrics and "env/inf" not in metrics
    assert metrics["env/k0"] == 0.0


def test_the_keys_that_name_the_episode_are_not_metrics():
    metrics = episode_metrics([with_info({"index": 7, "split": "train", "seed": 3, "win": True}),
                               with_info({"index": 9, "seed": 4, "win": False})])
    assert {key for key in metrics if key.startswith("env/")} == {"env/win"}


def test_eval_metrics_keep_the_env_prefix_under_eval():
    metrics = episode_metrics([with_info({"win": True})], prefix="eval/")
    assert metrics["eval/env/win"] == 1.0


def test_the_rollouts_trajectory_message_carries_cut_turns_and_info_values():
    from google.protobuf import struct_pb2

    from opentinker_api.common.v1 import trajectory_pb2
    from opentinker_coordinator.adapters.remote import trajectory_from_message

    def turn(truncated: bool, **info: object) -> trajectory_pb2.Turn:
        struct = struct_pb2.Struct()
        struct.update(info)
        return trajectory_pb2.Turn(truncated=truncated, info=struct)

    message = trajectory_pb2.Trajectory(turns=[turn(True, illegal=True), turn(False, illegal=False, score=2)],
                                        stop_reason=trajectory_pb2.STOP_REASON_DONE)
    trajectory = trajectory_from_message(message)
    assert trajectory.truncated_turns == 1
    assert trajectory.env_values == {"illegal": [1.0, 0.0], "score": [2.0]}


def test_the_final_message_says_what_was_measured():
    from opentinker_coordinator.driver.episode_metrics import accuracy_summary
    batch = [episode(1.0, StopReason.DONE, True), episode(0.0, StopReason.MAX_TURN_TOKENS),
             episode(0.0, StopReason.ENV_ERROR), episode(0.0, StopReason.DONE, False)]
    assert accuracy_summary(episode_metrics(batch, prefix="eval/")) == (
        "accuracy 0.333 over 3 episodes; 1 cut off by a token limit; 1 not judged, counted wrong; "
        "1 failed by the environment, left out")
    judged_cut = Trajectory(group_id="g", token_ids=[1, 2], loss_mask=[0, 1], sampling_logprobs=[0.0] * 2,
                            total_reward=0.0, stop_reason=StopReason.DONE, truncated_turns=1, correct=False)
    assert accuracy_summary(episode_metrics([episode(1.0, StopReason.DONE, True), judged_cut], prefix="eval/")) == (
        "accuracy 0.500 over 2 episodes; 1 cut off by a token limit")  # the game judged the cut reply
    assert accuracy_summary(episode_metrics([episode(0.0, StopReason.MAX_TURN_TOKENS)], prefix="eval/")) is None
