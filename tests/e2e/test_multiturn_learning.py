"""CI's short multi-turn learning check: one seed of bench/multiturn_rl.py on the shared stack.

guess_number (secret 1..4, three turns, higher/lower hints): an SFT warm-up on a scripted
player who follows 80% of the hints, then 80 RL steps with per-turn advantages. The mean
train reward of the last 20 steps must beat the first 20 by 0.04 (the bench's 9-seed numbers
are in docs/decisions.md), the success rate must not fall, and replies cut by the token limit
(the collapse the KL term is there to prevent) must never reach half of a step's episodes.
"""

from __future__ import annotations

import pytest

from tests._bench import load_bench

SEED = 5
WINDOW = 20


def guesses_outside_the_hints(chat: dict, low: int, high: int) -> int:
    """How many guesses of a warm-up chat lie outside the interval its earlier hints allow."""
    outside = 0
    turns = chat["messages"][2:]
    for index, guess_message in enumerate(turns[0::2]):
        guess = int(guess_message["content"])
        outside += not low <= guess <= high
        hint = turns[2 * index + 1]["content"] if 2 * index + 1 < len(turns) else None
        if hint == "higher":
            low = max(low, guess + 1)
        elif hint == "lower":
            high = min(high, guess - 1)
    return outside


def test_the_warm_up_player_follows_hints_as_often_as_asked():
    bench = load_bench("multiturn_rl")
    game = bench.GameConfig()
    following = bench.warmup_transcripts(game, 400, seed=0, follow=1.0)
    ignoring = bench.warmup_transcripts(game, 400, seed=0, follow=0.0)
    assert sum(guesses_outside_the_hints(chat, game.low, game.high) for chat in following) == 0
    assert sum(guesses_outside_the_hints(chat, game.low, game.high) for chat in ignoring) > 50


@pytest.mark.timeout(600)
def test_multi_turn_rl_raises_guess_number_reward(stack, tmp_path):
    bench = load_bench("multiturn_rl")
    result = bench.run_seed(stack.address("scheduler"), SEED, tmp_path, bench.Recipe(), window=WINDOW,
                            api_key=stack.api_key)
    assert len(result.rewards) == bench.Recipe().rl_steps
    assert result.gain >= 0.04, f"train reward did not rise: {[round(r, 3) for r in result.rewards]}"
    assert result.mean(result.accuracies, True) >= result.mean(result.accuracies, False)
    truncated = result.diagnostics["truncated"]
    assert len(truncated) == len(result.rewards)
    assert max(truncated) < 0.5, f"replies cut by the token limit took over: {truncated}"
