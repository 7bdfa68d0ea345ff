"""The multi-turn learning bench's pipeline, short, on the shared stack: bench/multiturn_rl.py's
SFT warm-up and RL on nim (a two-player game against the environment's random opponent) run
end to end and report every step, with the game's own metrics. The learning claim (greedy
success up by the target for every seed within 10 minutes of RL) is the bench's: it takes
minutes per seed, so CI runs 4 RL steps (`python bench/multiturn_rl.py` for the claim).
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


def test_the_guessing_warm_up_player_follows_hints_as_often_as_asked():
    games = load_bench("_multiturn_games")
    config = games.guess_number().config
    following = games.guess_transcripts(config, 0, 400, follow=1.0)
    ignoring = games.guess_transcripts(config, 0, 400, follow=0.0)
    assert sum(guesses_outside_the_hints(chat, config["low"], config["high"]) for chat in following) == 0
    assert sum(guesses_outside_the_hints(chat, config["low"], config["high"]) for chat in ignoring) > 50


def test_the_nim_warm_up_player_plays_legal_moves_by_a_losing_rule_and_by_chance():
    games = load_bench("_multiturn_games")
    chats = games.nim().warmup(0, 300)
    ruled = moves = 0
    for chat in chats:
        messages = chat["messages"]
        for prompt, reply in zip(messages[1::2], messages[2::2], strict=False):
            stones = int(prompt["content"].split("Stones: ")[1].split(".")[0])
            take = int(reply["content"])
            assert 1 <= take <= min(3, stones)
            moves += 1
            ruled += take == games.wrong_rule(stones, 3)
    assert 0.55 < ruled / moves < 0.8  # half by the rule, plus the random moves that match it


@pytest.mark.timeout(300)
def test_the_multi_turn_pipeline_warms_up_then_reports_every_rl_step(stack, tmp_path):
    bench = load_bench("multiturn_rl")
    games = load_bench("_multiturn_games")
    nim = games.nim(8)
    recipe = bench.recipe_for(nim, bench.quick_recipe(), {"rl_steps": 4})  # nim's own tuning (async k=1)
    assert recipe.max_staleness == nim.tuned["max_staleness"] and recipe.warmup_chats == 200
    result = bench.run_seed(stack.address("scheduler"), nim, SEED, tmp_path, recipe, window=2, api_key=stack.api_key)
    assert len(result.rewards) == recipe.rl_steps
    assert all(-1.0 <= r <= 1.0 for r in result.rewards)  # +1 win, -1 loss or illegal move
    assert 0.0 <= result.eval_before <= 1.0 and 0.0 <= result.eval_after <= 1.0
    assert {name: len(values) for name, values in result.diagnostics.items()} == \
        {name: recipe.rl_steps for name in bench.DIAGNOSTICS}
    assert result.max_truncated < 1.0
