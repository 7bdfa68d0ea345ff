import math

import pytest

from opentinker_coordinator.driver import advantages
from opentinker_coordinator.driver.advantages import Estimator, compute, discounted_returns, per_turn_grpo


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


def test_discounted_returns_accumulate_from_the_last_turn():
    assert discounted_returns([0.1, 0.0, 1.0], 1.0) == [1.1, 1.0, 1.0]
    assert discounted_returns([0.0, 0.0, 1.0], 0.5) == [0.25, 0.5, 1.0]
    assert discounted_returns([], 0.9) == []


def test_per_turn_grpo_compares_each_turn_with_the_same_turn_of_the_group():
    # episode a: wins at turn 1; b: turn 1 wasted, wins at turn 2; c: one turn, wins
    returns = {"g": [[1.2, 1.0], [1.1, 1.0, 1.0], [1.2]], "h": [[0.5]]}
    result = per_turn_grpo(returns, normalize_by_std=False)
    turn0_mean = (1.2 + 1.1 + 1.2) / 3
    assert result["g"][0][0] == pytest.approx(1.2 - turn0_mean)
    assert result["g"][1][0] == pytest.approx(1.1 - turn0_mean)
    assert result["g"][0][1] == pytest.approx(0.0) and result["g"][1][1] == pytest.approx(0.0)
    assert result["g"][1][2] == 0.0  # only b reached turn 2: nothing to compare with
    assert result["h"] == [[0.0]]


def test_per_turn_grpo_normalizes_each_turn_by_its_std():
    result = per_turn_grpo({"g": [[2.0, 1.0], [0.0, 0.0]]}, normalize_by_std=True)
    assert result["g"][0] == pytest.approx([1.0, 1.0], abs=1e-5)
    assert result["g"][1] == pytest.approx([-1.0, -1.0], abs=1e-5)


def test_compute_refuses_the_per_turn_estimator():
    with pytest.raises(ValueError, match="per turn"):
        compute(Estimator.DISCOUNTED_RETURN, {"g": [1.0]})
