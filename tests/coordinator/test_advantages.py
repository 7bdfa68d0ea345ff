import math

import pytest

from opentinker_coordinator import advantages
from opentinker_coordinator.advantages import Estimator


def test_grpo_subtracts_the_group_mean():
    result = advantages.grpo({"a": [1.0, 0.0, 0.0, 1.0], "b": [0.0, 0.0]}, normalize_by_std=False)
    assert result == {"a": [0.5, -0.5, -0.5, 0.5], "b": [0.0, 0.0]}


def test_grpo_with_std_divides_by_the_group_std():
    result = advantages.grpo({"a": [1.0, 0.0]}, normalize_by_std=True)
    # mean 0.5, population std 0.5
    assert result["a"] == pytest.approx([1.0, -1.0], abs=1e-5)


def test_grpo_uniform_group_has_zero_advantage_even_normalized():
    assert advantages.grpo({"a": [1.0, 1.0, 1.0]}, normalize_by_std=True)["a"] == [0.0, 0.0, 0.0]


def test_rloo_uses_the_mean_of_the_others():
    result = advantages.rloo({"a": [1.0, 0.0, 0.0]})
    assert result["a"] == pytest.approx([1.0, -0.5, -0.5])
    assert advantages.rloo({"solo": [3.0]}) == {"solo": [0.0]}


def test_reinforce_plus_plus_normalizes_over_the_batch():
    result = advantages.reinforce_plus_plus({"a": [1.0, 1.0], "b": [0.0, 0.0]})
    assert result["a"] == pytest.approx([1.0, 1.0], abs=1e-5)
    assert result["b"] == pytest.approx([-1.0, -1.0], abs=1e-5)
    flat = result["a"] + result["b"]
    assert math.isclose(sum(flat), 0.0, abs_tol=1e-9)


def test_compute_dispatches_by_estimator():
    rewards = {"a": [1.0, 0.0, 0.0]}
    assert advantages.compute(Estimator.RLOO, rewards) == advantages.rloo(rewards)
    assert advantages.compute(Estimator.GRPO, rewards) == advantages.grpo(rewards, normalize_by_std=False)
