from opentinker_coordinator.advantages import Estimator
from opentinker_coordinator.datums import rl_datums, trajectory_advantages
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
