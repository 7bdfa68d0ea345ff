"""CI's short two-agent self-play check: one seed of bench/gomoku_selfplay.py on the shared stack.

Gomoku 4x4, three in a row, an illegal move forfeits. A tiny-llama gets an SFT warm-up on
transcripts of a scripted player (both colours of real two-seat matches played through the
Agent Protocol) who plays off the board 60% of the time; then alpha and beta, both starting
from that checkpoint, play each other in both colours every step (ROUND_ROBIN) and learn with
per-turn advantages and KL to the warm-up policy. Both agents' invalid-move rates fall
well below where they started in the bench (3/3 seeds over 60 steps, docs/decisions.md); here
a 5-step asynchronous run (max_staleness 1) checks the pipeline: every agent's match metrics
for every step, zero-sum win rates, Elo ratings that sum to 2000, and common checkpoints that
name both agents.
"""

from __future__ import annotations

import pytest

from tests._bench import load_bench

SEED = 2
WINDOW = 5
STEPS = 5
SYSTEM = "Gomoku: 3 in a row wins. X moves first. Reply with a move like c3."


def test_warm_up_chats_are_what_each_seat_is_shown():
    """Chats of both colours: the game's system prompt, then user/assistant turns in order;
    white's first observation already holds black's opening move; about 1 - legal of the
    moves are illegal (each ends its game: max_invalid_moves is 0)."""
    bench = load_bench("gomoku_selfplay")
    game = bench.GameConfig()
    chats, invalid = bench.warmup_transcripts(game, 300, seed=0, legal=0.4)
    assert 0.5 < invalid < 0.7
    firsts = {chat["messages"][1]["content"].splitlines()[-1] for chat in chats}
    assert firsts == {"X to move", "O to move"}  # both seats
    for chat in chats:
        messages = chat["messages"]
        assert messages[0] == {"role": "system", "content": SYSTEM}
        assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * ((len(messages) - 1) // 2)
    white = next(chat for chat in chats if chat["messages"][1]["content"].endswith("O to move"))
    assert "\n\nX: " in white["messages"][1]["content"]  # the reset board, then black's move


@pytest.mark.timeout(240)
def test_a_short_self_play_run_reports_every_agent_every_step(stack, tmp_path):
    """The bench's pipeline end to end, short: warm-up, SFT, then two agents in self-play. The
    learning claim (invalid moves fall) needs ~30+ steps (20 were not enough for every seed:
    one agent's rate spiked at the end) and lives in the bench (3/3 seeds, docs/decisions.md)."""
    bench = load_bench("gomoku_selfplay")
    # asynchronous (k = 1): both agents on the one pipeline, each playing a step ahead of its training
    recipe = bench.Recipe(sft_steps=60, warmup_matches=300, rl_steps=STEPS, eval_episodes=2, eval_every=0,
                          max_staleness=1)
    result = bench.run_seed(stack.address("scheduler"), SEED, tmp_path, recipe, window=WINDOW,
                            api_key=stack.api_key, log=lambda *_: None)
    assert result.succeeded
    for agent in bench.AGENTS:
        for name in ("invalid", "win", "draw", "length", "games", "elo", "reward"):
            assert len(result.agents[agent][name]) == STEPS, (agent, name)
        assert all(games == 2 * recipe.group_size for games in result.agents[agent]["games"])
        assert all(0.0 <= rate <= 1.0 for rate in result.agents[agent]["invalid"])
        assert [step for step, _ in result.evals[agent]["eval_reward"]] == [0, STEPS]
    # zero-sum: alpha's wins are beta's losses, and the ratings only move between them
    for alpha_win, beta_win, draw in zip(result.agents["alpha"]["win"], result.agents["beta"]["win"],
                                         result.agents["alpha"]["draw"], strict=True):
        assert alpha_win + beta_win + draw == pytest.approx(1.0)
    assert all(abs(total - 2000.0) < 1e-6 for total in result.elo_sums())
    assert result.checkpoints and set(result.checkpoints[-1]) == set(bench.AGENTS)
