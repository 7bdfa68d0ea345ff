import pytest

from opentinker_coordinator.driver.advantages import Estimator
from opentinker_coordinator.driver.datums import action_runs, rl_datums, trajectory_advantages, turn_rewards
from opentinker_coordinator.types import StopReason, Trajectory


def trajectory(group: str, reward: float, *, stop=StopReason.DONE, mask=(0, 0, 1, 1)) -> Trajectory:
    return Trajectory(group_id=group, token_ids=[5, 6, 7, 8], loss_mask=list(mask),
                      sampling_logprobs=[0.0, 0.0, -0.5, -0.25], total_reward=reward, stop_reason=stop)


def test_advantage_is_placed_on_sampled_tokens_only():
    datums = rl_datums([trajectory("g", 1.0), trajectory("g", 0.0)], Estimator.GRPO, normalize_by_std=False)
    assert [d.advantages for d in datums] == [[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, -0.5, -0.5]]
    assert datums[0].loss_mask == [0.0, 0.0, 1.0, 1.0]
    assert datums[0].sampling_logprobs == [0.0, 0.0, -0.5, -0.25]


def test_environment_failures_are_excluded_from_baseline_and_batch():
    trajectories = [trajectory("g", 1.0), trajectory("g", 0.0, stop=StopReason.ENV_ERROR), trajectory("g", 0.0)]
    assert trajectory_advantages(trajectories, Estimator.GRPO, normalize_by_std=False) == [0.5, None, -0.5]
    assert len(rl_datums(trajectories, Estimator.GRPO, normalize_by_std=False)) == 2


def test_trajectories_without_sampled_tokens_are_dropped():
    datums = rl_datums([trajectory("g", 1.0, mask=(0, 0, 0, 0)), trajectory("g", 0.0)],
                       Estimator.GRPO, normalize_by_std=False)
    assert len(datums) == 1 and datums[0].advantages[-1] == -0.5


def multi_turn(group: str, turn_rewards: list[float], *, stop=StopReason.DONE) -> Trajectory:
    """A prompt token, then per turn: two sampled tokens (reward on the second) and one
    observation token."""
    tokens, mask, rewards = [1], [0], [0.0]
    for reward in turn_rewards:
        tokens += [2, 3, 4]
        mask += [1, 1, 0]
        rewards += [0.0, reward, 0.0]
    return Trajectory(group_id=group, token_ids=tokens, loss_mask=mask, sampling_logprobs=[0.0] * len(tokens),
                      total_reward=sum(turn_rewards), stop_reason=stop, token_rewards=rewards)


def test_action_runs_are_the_sampled_spans():
    assert action_runs([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert action_runs([0, 0]) == []


def test_turn_rewards_sum_the_token_rewards_of_each_span_and_keep_the_total():
    runs = action_runs(multi_turn("g", [0.1, 1.0]).loss_mask)
    assert turn_rewards(multi_turn("g", [0.1, 1.0]), runs) == pytest.approx([0.1, 1.0])
    without = Trajectory(group_id="g", token_ids=[1, 2, 3, 4], loss_mask=[0, 1, 0, 1], sampling_logprobs=[0.0] * 4,
                         total_reward=0.7, stop_reason=StopReason.DONE)
    assert turn_rewards(without, action_runs(without.loss_mask)) == [0.0, 0.7]


def test_discounted_return_puts_each_turns_advantage_on_its_own_tokens():
    found_first = multi_turn("g", [1.2])
    found_second = multi_turn("g", [0.1, 1.0])
    failed = multi_turn("g", [0.0, 0.0], stop=StopReason.MAX_TURNS)
    broken = multi_turn("g", [5.0], stop=StopReason.ENV_ERROR)
    datums = rl_datums([found_first, found_second, failed, broken], Estimator.DISCOUNTED_RETURN,
                       normalize_by_std=False, gamma=1.0)
    assert len(datums) == 3  # the environment failure is not trained
    turn0_mean = (1.2 + 1.1 + 0.0) / 3
    assert datums[0].advantages == pytest.approx([0.0, 1.2 - turn0_mean, 1.2 - turn0_mean, 0.0])
    # turn 1 of found_second (return 1.0) against failed's turn 1 (return 0.0): +0.5 / -0.5
    assert datums[1].advantages == pytest.approx([0.0] + [1.1 - turn0_mean] * 2 + [0.0] + [0.5, 0.5, 0.0])
    assert datums[2].advantages == pytest.approx([0.0] + [-turn0_mean] * 2 + [0.0] + [-0.5, -0.5, 0.0])


def test_discounting_shrinks_later_rewards_seen_from_earlier_turns():
    datums = rl_datums([multi_turn("g", [0.0, 1.0]), multi_turn("g", [0.0, 0.0])], Estimator.DISCOUNTED_RETURN,
                       normalize_by_std=False, gamma=0.5)
    assert datums[0].advantages[1] == pytest.approx(0.25)  # G_0 = 0.5 against the mean 0.25
    assert datums[0].advantages[4] == pytest.approx(0.5)
