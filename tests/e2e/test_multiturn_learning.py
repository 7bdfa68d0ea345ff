"""CI's short multi-turn learning check: one seed of bench/multiturn_rl.py on the shared stack.

guess_number (secret 1..4, three turns, higher/lower hints): an SFT warm-up on a scripted
player who follows 80% of the hints, then 60 RL steps with per-turn advantages. The train
reward of the last 15 steps must beat the first 15 (the bench's 3-seed numbers are in
docs/decisions.md), the success rate must not fall, and no episode may be lost to the
token limit (the failure mode the KL term is there to prevent).
"""

from __future__ import annotations


import pytest

from tests._bench import load_bench as _load

SEED = 5
WINDOW = 20


def load_bench():
    return _load("multiturn_rl")


def test_the_warm_up_player_follows_hints_as_often_as_asked():
    bench = load_bench()
    game = bench.GameConfig()
    chats = bench.warmup_transcripts(game, 400, seed=0, follow=1.0)
    for chat in chats:
        low, high = game.low, game.high
        turns = chat["messages"][2:]
        for guess_message, hint_message in zip(turns[0::2], turns[1::2], strict=False):
            guess = int(guess_message["content"])
            assert low <= guess <= high, chat
            low, high = (guess + 1, high) if hint_message["content"] == "higher" else (low, guess - 1)


@pytest.mark.timeout(600)
def test_multi_turn_rl_raises_guess_number_reward(stack, tmp_path):
    bench = load_bench()
    result = bench.run_seed(stack.address("scheduler"), SEED, tmp_path, bench.Recipe(), window=WINDOW,
                            api_key=stack.api_key)
    assert len(result.rewards) == bench.Recipe().rl_steps
    assert result.gain >= 0.04, f"train reward did not rise: {[round(r, 3) for r in result.rewards]}"
    assert result.mean(result.accuracies, True) >= result.mean(result.accuracies, False)
    truncated = result.diagnostics["truncated"]
    assert len(truncated) == len(result.rewards)
    assert max(truncated) < 0.5, f"replies cut by the token limit took over: {truncated}"
