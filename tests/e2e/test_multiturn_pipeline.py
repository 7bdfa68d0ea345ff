"""The multi-turn learning bench's pipeline, short, on the shared stack: bench/multiturn_rl.py's
SFT warm-up and RL on guess_number (secret 1..4, three turns, higher/lower hints) run end to end
and report every step. The learning claim (the train reward rises for every seed) is the bench's:
80 RL steps per seed take minutes, so CI runs 4 (`python bench/multiturn_rl.py` for the claim;
its 9-seed numbers are in docs/decisions.md).
"""

from __future__ import annotations

import pytest

from tests._bench import load_bench

SEED = 5


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


@pytest.mark.timeout(300)
def test_the_multi_turn_pipeline_warms_up_then_reports_every_rl_step(stack, tmp_path):
    bench = load_bench("multiturn_rl")
    recipe = bench.Recipe(warmup_chats=200, sft_steps=20, rl_steps=4)
    result = bench.run_seed(stack.address("scheduler"), SEED, tmp_path, recipe, window=2, api_key=stack.api_key)
    assert len(result.rewards) == len(result.accuracies) == recipe.rl_steps
    assert all(0.0 <= r <= 1.5 for r in result.rewards)  # 1 for the secret plus shaping (1.2 at most on 1..4)
    assert {name: len(values) for name, values in result.diagnostics.items()} == \
        {name: recipe.rl_steps for name in bench.DIAGNOSTICS}
