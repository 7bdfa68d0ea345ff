"""Two-agent Gomoku self-play through the five services: both agents' invalid moves fall.

    .venv/bin/python bench/gomoku_selfplay.py                 # own stack, seeds 1-3
    .venv/bin/python bench/gomoku_selfplay.py --seeds 4 5 --rl-steps 80 --scheduler 127.0.0.1:50051

Per seed: a random-init tiny-llama gets an SFT warm-up on the transcripts of a scripted player
who plays BOTH colours of real two-seat matches, hosted in this process by the Coordinator's
Agent Protocol (`AgentProtocol` over `local_environments`), so every chat is exactly what the
Rollout shows that seat: the game's system prompt, the opening observation, then one user
turn per awaited observation (the opponent's move and the board, or "Illegal: ..." after a
rejected move). The scripted player makes a legal move with probability `--legal` (0.4: a
random empty cell, taking an immediate win half the time) and otherwise an illegal one, by
default off the board (`--illegal`; "taken" and "repeat" put it on a taken cell, which the
tiny model cannot learn to avoid: it never reads the board, see docs/decisions.md), so the
warm-up policy starts with a clearly non-zero invalid-move rate.

Then one multi-agent RL job: agents "alpha" and "beta" both start from the warm-up checkpoint
(full weights, KL to it in the loss), ROUND_ROBIN pairing (each agent plays both colours
every step, so the first player's advantage cancels and alpha's score against beta starts
near 50%), zero-sum gomoku 4x4 with three in a row where an illegal move forfeits
(`--max-invalid-moves 0`; more would make earlier ones cost `--invalid-move-penalty` and a
retry), per-turn advantages (DISCOUNTED_RETURN, gamma 0.1), and every agent is also evaluated
alone (greedy) against the game's scripted opponent.

Recorded per step and agent: invalid-move rate, win/draw rate, game length, Elo, and the
eval results. `score` is alpha's win rate against beta with draws counted as half a win
(50% = even; with draws the raw win rate of both agents is below 50%). PASS for a seed when,
for each agent, the mean invalid-move rate of the last `--window` steps is at most
`--max-ratio` x that of the first window and dropped by at least `--min-drop`. The score
curve (moving average over `--smooth` steps) is reported as its largest deviation from 50%
and the deviation at the end: a lead that appears and later shrinks is the self-play
dynamic, but it is stochastic, so it is measured and printed, not required.

With a private stack the warm-up and final policies are also probed (`move_probe`): where
their next move's probability mass goes (off the board, taken cells, empty cells) on
held-out positions. Writes results.json and plot.svg (hand-written SVG) under --out.
tests/e2e/test_gomoku_selfplay.py runs a short version of this recipe in CI.

Measured (2026-11-22, 2-core CPU): see docs/decisions.md ("Two-agent Gomoku self-play that learns").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from _private_stack import bench_stack

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ("alpha", "beta")
SEATS = ("black", "white")


@dataclass(frozen=True, kw_only=True)
class GameConfig:
    size: int = 4
    win_length: int = 3
    invalid_move_penalty: float = -0.5
    max_invalid_moves: int = 0
    """Illegal moves per player and game that are penalised and retried; one more forfeits."""

    def config(self, opponent: str = "none", **extra) -> dict:
        return {"size": self.size, "win_length": self.win_length, "opponent": opponent,
                "invalid_move_penalty": self.invalid_move_penalty,
                "max_invalid_moves": self.max_invalid_moves, **extra}

    def env(self, opponent: str = "none", **extra) -> dict:
        return {"env_name": "gomoku", "config": self.config(opponent, **extra)}

    @property
    def max_turns(self) -> int:
        """A seat's most turns in one game: its moves plus every illegal one (the last forfeits)."""
        return (self.size * self.size + 1) // 2 + self.max_invalid_moves + 1


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """Everything a seed's run depends on besides the seed."""

    game: GameConfig = field(default_factory=GameConfig)
    model: str = "tiny-llama"
    legal: float = 0.4
    illegal: str = "off_board"
    """The warm-up player's illegal moves: one of ILLEGAL_KINDS."""
    warmup_matches: int = 1500
    sft_steps: int = 300
    sft_lr: float = 1e-3
    rl_steps: int = 60
    lr: float = 3e-4
    kl_coef: float = 0.1
    max_grad_norm: float = 1.0
    estimator: str = "DISCOUNTED_RETURN"
    gamma: float = 0.1
    """Per-turn discount (0 is read as 1 by the Coordinator; use a small positive value)."""
    aggregation: str = "SEQUENCE_MEAN"
    max_new_tokens: int = 4
    temperature: float = 1.0
    batch_size: int = 1
    group_size: int = 8
    eval_episodes: int = 16
    eval_every: int = 10
    elo_k: float = 16.0
    max_staleness: int = 0
    """The self-play job's async.max_staleness: 0 = the agents in lockstep (barriers); k >= 1 =
    each agent's rollouts run up to k steps ahead of its training."""
    checkpoint_every: int = 0


# -- warm-up transcripts: a scripted player on both seats of real matches ---------------------

ILLEGAL_KINDS = ("off_board", "taken", "repeat")


def scripted_choice(board, stone: int, rng: random.Random, legal: float, illegal: str = "off_board") -> str:
    """A legal move with probability `legal` (an immediate win half the time it has one, else
    a random empty cell); otherwise an illegal one of kind `illegal`: "off_board" (a cell one
    column right of or one row below the board), "taken" (a random stone's cell) or "repeat"
    (the newest stone's cell: the opponent's last move). On the empty board there is no taken
    cell, so "taken" and "repeat" play a legal move there."""
    from opentinker_runtime.games.gomoku import Move, move_name

    if rng.random() >= legal:
        if illegal == "off_board":
            line = rng.randrange(board.size + 1)
            return move_name(rng.choice([Move(line, board.size), Move(board.size, line)]))
        if board.history:
            return move_name((rng.choice(board.history) if illegal == "taken" else board.history[-1])[0])
    wins = board.winning_moves(stone)
    if wins and rng.random() < 0.5:
        return move_name(rng.choice(wins))
    return move_name(rng.choice(list(board.empty_cells())))


async def _play_warmup_match(protocol, game: GameConfig, index: int, rng: random.Random,
                             legal: float, illegal: str) -> tuple[list[dict], list[bool]]:
    """One match, both seats scripted: each seat's chat as the Rollout would show it, and
    whether each submitted move was accepted."""
    from opentinker_env.game import opening_user_content
    from opentinker_runtime.games.gomoku_game import SEAT_STONES
    from opentinker_coordinator.protocol.seated_environment import MatchEnvironmentRef

    match = await protocol.open_match(
        job_id="warmup", environment=MatchEnvironmentRef(env_name="gomoku", config=game.config()),
        seats=SEATS, reset_kwargs={"index": index, "split": "train"},
        agents_by_seat={seat: f"scripted-{seat}" for seat in SEATS})
    board_of = match.environment.game  # the GomokuGame, so the player can read its board

    async def seat_chat(seat: str) -> dict:
        agent = f"scripted-{seat}"
        protocol.join(match.match_id, agent, seat)
        turn = await protocol.await_turn(match.match_id, agent)
        messages = [{"role": "system", "content": match.system_prompt},
                    {"role": "user", "content": opening_user_content(match.initial_user_message, turn.observation)}]
        while not turn.finished:
            move = scripted_choice(board_of.board, SEAT_STONES[seat], rng, legal, illegal)
            messages.append({"role": "assistant", "content": move})
            result = await protocol.submit(match.match_id, agent, turn.turn_index, move)
            if result.finished:
                break
            turn = await protocol.await_turn(match.match_id, agent)  # the next observation
            if not turn.finished:
                messages.append({"role": "user", "content": turn.observation})
        return {"messages": messages}

    chats = await asyncio.gather(*(seat_chat(seat) for seat in SEATS))
    accepted = [action.accepted for action in match.history]
    protocol.forget([match.match_id])
    return list(chats), accepted


def warmup_transcripts(game: GameConfig, matches: int, seed: int, legal: float,
                       illegal: str = "off_board") -> tuple[list[dict], float]:
    """Both seats' chats of `matches` scripted two-seat matches (up to 2 x matches chats) and
    the share of their moves that were illegal."""
    from opentinker_runtime.games.gomoku_game import GomokuGame
    from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
    from opentinker_coordinator.protocol.local_seated import local_environments

    async def play_all() -> tuple[list[dict], float]:
        protocol = AgentProtocol(local_environments(lambda config: GomokuGame(**config)))
        rng = random.Random(f"gomoku-warmup:{seed}")
        chats: list[dict] = []
        accepted: list[bool] = []
        for index in range(matches):
            match_chats, match_accepted = await _play_warmup_match(protocol, game, index, rng, legal, illegal)
            # a seat whose match ended before its first turn has nothing to learn from
            chats += [chat for chat in match_chats if len(chat["messages"]) > 2]
            accepted += match_accepted
        return chats, accepted.count(False) / max(1, len(accepted))

    return asyncio.run(play_all())


# -- jobs -------------------------------------------------------------------------------------

def sft_spec(data_path: str, seed: int, recipe: Recipe) -> dict:
    return {"type": "SFT", "dataset": {"path": data_path},
            "policy": {"model": {"builtin": {"name": recipe.model, "seed": seed}}, "adaptation": {"full": {}},
                       "algorithm": {"optimizer": {"learning_rate": recipe.sft_lr}}},
            "training": {"total_steps": recipe.sft_steps, "batch_size": 8, "seed": seed}}


def agent_spec(agent_id: str, checkpoint_id: str, recipe: Recipe) -> dict:
    kl = {"kl_coef": recipe.kl_coef, "kl_placement": "LOSS"} if recipe.kl_coef else {}
    return {"agent_id": agent_id, "model": {"checkpoint": {"checkpoint_id": checkpoint_id}},
            "adaptation": {"full": {"keep_reference": bool(recipe.kl_coef)}},
            "algorithm": {"optimizer": {"learning_rate": recipe.lr, "max_grad_norm": recipe.max_grad_norm},
                          "loss": {"aggregation": recipe.aggregation, **kl},
                          "advantage": {"estimator": recipe.estimator, "normalize_by_std": True,
                                        "gamma": recipe.gamma}},
            "sampling": {"max_new_tokens": recipe.max_new_tokens, "temperature": recipe.temperature},
            "limits": {"max_turns": recipe.game.max_turns}}


def selfplay_spec(checkpoint_id: str, seed: int, recipe: Recipe) -> dict:
    return {"type": "RL", "environment": recipe.game.env("none"),
            "agents": [agent_spec(agent, checkpoint_id, recipe) for agent in AGENTS],
            "multi_agent": {"pairing": "PAIRING_ROUND_ROBIN", "elo_k": recipe.elo_k,
                            "eval_environment": recipe.game.env("scripted", seed=seed)},
            "training": {"total_steps": recipe.rl_steps, "batch_size": recipe.batch_size,
                         "group_size": recipe.group_size, "eval_episodes": recipe.eval_episodes,
                         "eval_every_steps": recipe.eval_every, "seed": seed,
                         "checkpoint_every_steps": recipe.checkpoint_every},
            "async": {"max_staleness": recipe.max_staleness}}


# -- results ----------------------------------------------------------------------------------

PER_STEP = {"invalid": "match/invalid_move_rate", "win": "match/win_rate", "draw": "match/draw_rate",
            "loss_rate": "match/loss_rate", "length": "match/game_length", "games": "match/games",
            "aborted": "match/aborted", "elo": "elo", "reward": "reward/mean", "kl": "kl",
            "grad_norm": "grad_norm", "truncated": "truncated", "rollout_s": "time/rollout_s",
            "update_s": "time/update_s"}
EVAL = {"eval_reward": "eval/reward/mean", "eval_win": "eval/accuracy"}


def moving_average(values: list[float], width: int) -> list[float]:
    """Trailing mean over up to `width` values (shorter at the start)."""
    return [sum(values[max(0, i - width + 1):i + 1]) / len(values[max(0, i - width + 1):i + 1])
            for i in range(len(values))]


@dataclass(frozen=True, kw_only=True)
class RunResult:
    seed: int
    window: int
    smooth: int
    steps: int
    seconds: float
    sft_seconds: float
    warmup_invalid: float
    """Share of the warm-up transcripts' moves that were illegal."""
    agents: dict[str, dict[str, list[float]]]
    """agent -> PER_STEP name -> one value per RL step."""
    evals: dict[str, dict[str, list[tuple[int, float]]]]
    """agent -> EVAL name -> (step, value) (step 0 = before RL, the last = after)."""
    checkpoints: list[dict[str, str]]
    succeeded: bool
    sft_checkpoint: str = ""
    probe: dict[str, dict[str, float]] = field(default_factory=dict)
    """Policy ("warm-up", "alpha", "beta") -> move_probe's shares, when the checkpoints were readable."""

    def first(self, agent: str, name: str = "invalid") -> float:
        part = self.agents[agent][name][:self.window]
        return sum(part) / len(part)

    def last(self, agent: str, name: str = "invalid") -> float:
        part = self.agents[agent][name][-self.window:]
        return sum(part) / len(part)

    @property
    def score(self) -> list[float]:
        """alpha's score against beta per step: win rate + half the draw rate."""
        a = self.agents[AGENTS[0]]
        return [w + d / 2 for w, d in zip(a["win"], a["draw"], strict=True)]

    @property
    def smoothed_score(self) -> list[float]:
        return moving_average(self.score, self.smooth)

    @property
    def max_deviation_step(self) -> int:
        """The step (1-based) where the smoothed score is farthest from 0.5, among the steps
        with a full moving-average window."""
        smoothed = self.smoothed_score
        first = min(self.smooth, len(smoothed)) - 1
        return max(range(first, len(smoothed)), key=lambda i: abs(smoothed[i] - 0.5)) + 1

    @property
    def max_deviation(self) -> float:
        """Largest smoothed score - 0.5 in absolute value (signed: + = alpha ahead)."""
        return self.smoothed_score[self.max_deviation_step - 1] - 0.5

    @property
    def final_deviation(self) -> float:
        return self.smoothed_score[-1] - 0.5

    @property
    def seconds_per_step(self) -> float:
        return self.seconds / self.steps if self.steps else 0.0

    def invalid_fell(self, agent: str, max_ratio: float, min_drop: float) -> bool:
        first, last = self.first(agent), self.last(agent)
        return last <= max_ratio * first and first - last >= min_drop

    def elo_sums(self) -> list[float]:
        return [a + b for a, b in zip(self.agents[AGENTS[0]]["elo"], self.agents[AGENTS[1]]["elo"], strict=True)]


def run_seed(scheduler: str, seed: int, out: Path, recipe: Recipe, *, window: int, smooth: int = 5,
             api_key: str | None = None, log=print, checkpoint_root: Path | None = None) -> RunResult:
    """SFT warm-up on scripted two-seat transcripts, then alpha vs beta self-play RL; with the
    stack's `checkpoint_root`, also probe the warm-up and final policies (`move_probe`)."""
    from opentinker.client import SchedulerClient, ServiceClient

    out.mkdir(parents=True, exist_ok=True)
    chats, warmup_invalid = warmup_transcripts(recipe.game, recipe.warmup_matches, seed, recipe.legal,
                                               recipe.illegal)
    data = out / f"warmup-{seed}.jsonl"
    data.write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    scheduler_client = SchedulerClient(scheduler, api_key=api_key)
    client = ServiceClient(scheduler, api_key=api_key)
    started = time.perf_counter()
    sft = client.follow(scheduler_client.submit_job(sft_spec(str(data), seed, recipe)).job_id)
    if not sft.succeeded:
        raise RuntimeError(f"seed {seed}: SFT warm-up failed: {sft.job.status_message}")
    sft_seconds = time.perf_counter() - started
    log(f"seed {seed}: warm-up SFT on {len(chats)} chats took {sft_seconds:.0f} s")
    started = time.perf_counter()

    def progress(step: int, values: dict[str, float]) -> None:
        if "match/invalid_move_rate" in values:
            log(f"seed {seed} step {step:>3}: invalid {values['match/invalid_move_rate']:.2f} "
                f"win {values['match/win_rate']:.2f} draw {values['match/draw_rate']:.2f} "
                f"elo {values['elo']:.0f} ({time.perf_counter() - started:.0f} s)")

    rl = client.follow(scheduler_client.submit_job(selfplay_spec(sft.final_checkpoint_id, seed, recipe)).job_id,
                       on_metrics=progress)
    seconds = time.perf_counter() - started
    if not rl.succeeded:
        raise RuntimeError(f"seed {seed}: self-play RL failed: {rl.job.status_message}")
    agents = {agent: {key: [v for _, v in rl.agent_series(agent, name)] for key, name in PER_STEP.items()}
              for agent in AGENTS}
    evals = {agent: {key: rl.agent_series(agent, name) for key, name in EVAL.items()} for agent in AGENTS}
    probe = {}
    if checkpoint_root is not None and rl.agent_checkpoint_ids:
        policies = {"warm-up": sft.final_checkpoint_id, **rl.agent_checkpoint_ids[-1]}
        probe = move_probe(checkpoint_root, policies, recipe.game)
    return RunResult(seed=seed, window=window, smooth=smooth, steps=len(agents[AGENTS[0]]["invalid"]),
                     seconds=seconds, sft_seconds=sft_seconds, warmup_invalid=warmup_invalid,
                     agents=agents, evals=evals, checkpoints=rl.agent_checkpoint_ids, succeeded=rl.succeeded,
                     sft_checkpoint=sft.final_checkpoint_id, probe=probe)


def move_probe(checkpoint_root: Path, policies: dict[str, str], game: GameConfig,
               positions: int = 80) -> dict[str, dict[str, float]]:
    """Where each policy puts its next move, on held-out warm-up positions (seed 12345): the
    probability of every cell name of the board plus one column and one row, summed into
    "off" (off the board), "taken" and "empty". `taken_share` = taken / (taken + empty) and
    `blind` = the mean share of taken cells: a policy that ignores the board has
    taken_share == blind; one that reads it has less."""
    import torch

    from opentinker_runtime.ml.chat import encode, render_prompt
    from opentinker_runtime.ml.models import load_model, quiet_transformers
    from opentinker_runtime.ml.sources import ModelKind, ModelSource

    quiet_transformers()
    chats, _ = warmup_transcripts(game, 60, 12345, 0.5, "off_board")
    letters = "".join(chr(ord("a") + i) for i in range(game.size + 1))
    names = [f"{letter}{row}" for row in range(1, game.size + 2) for letter in letters]
    header = " " + letters[:game.size]
    samples = []  # (messages, kind per name, share of taken cells)
    for chat in chats:
        messages = chat["messages"]
        for index, message in enumerate(messages):
            if message["role"] != "user" or header not in message["content"].split("\n"):
                continue
            lines = message["content"].split("\n")
            top = max(i for i, line in enumerate(lines) if line == header)
            rows = [line[len(str(game.size)):] for line in lines[top + 1:top + 1 + game.size]]
            kinds = ["off" if letters.index(name[0]) >= game.size or int(name[1:]) > game.size
                     else "taken" if rows[int(name[1:]) - 1][letters.index(name[0])] != "." else "empty"
                     for name in names]
            samples.append((messages[:index + 1], kinds, kinds.count("taken") / game.size ** 2))
    samples = samples[:positions]
    result = {}
    for label, checkpoint_id in policies.items():
        loaded = load_model(ModelSource(kind=ModelKind.CHECKPOINT, name=checkpoint_id), checkpoint_root)
        tokenizer, model = loaded.tokenizer, loaded.model
        totals = {"off": 0.0, "taken": 0.0, "empty": 0.0}
        with torch.no_grad():
            for messages, kinds, _ in samples:
                prompt = render_prompt(tokenizer, messages)
                answers = [encode(tokenizer, name + tokenizer.eos_token) for name in names]
                width = max(len(a) for a in answers)
                batch = torch.tensor([prompt + a + [tokenizer.pad_token_id] * (width - len(a)) for a in answers])
                logprobs = model(batch).logits.log_softmax(-1)
                for row, (answer, kind) in enumerate(zip(answers, kinds, strict=True)):
                    logprob = sum(logprobs[row, len(prompt) - 1 + t, token].item() for t, token in enumerate(answer))
                    totals[kind] += float(torch.tensor(logprob).exp())
        shares = {kind: total / len(samples) for kind, total in totals.items()}
        shares["taken_share"] = shares["taken"] / max(1e-9, shares["taken"] + shares["empty"])
        shares["blind"] = sum(blind for _, _, blind in samples) / len(samples)
        result[label] = shares
    return result


# -- report -----------------------------------------------------------------------------------

def print_table(results: list[RunResult], args: argparse.Namespace) -> None:
    print(f"{'seed':>4}  {'agent':>5}  {'invalid first':>13}  {'invalid last':>12}  {'win last':>8}  "
          f"{'draw last':>9}  {'len last':>8}  {'elo end':>7}  {'eval win 0->end':>15}  {'eval rew 0->end':>15}  ok")
    for r in results:
        for agent in AGENTS:
            ev = r.evals[agent]
            win = f"{ev['eval_win'][0][1]:.2f}->{ev['eval_win'][-1][1]:.2f}" if ev["eval_win"] else "-"
            rew = f"{ev['eval_reward'][0][1]:+.2f}->{ev['eval_reward'][-1][1]:+.2f}" if ev["eval_reward"] else "-"
            ok = "yes" if r.invalid_fell(agent, args.max_ratio, args.min_drop) else "NO"
            print(f"{r.seed:>4}  {agent:>5}  {r.first(agent):>13.3f}  {r.last(agent):>12.3f}  "
                  f"{r.last(agent, 'win'):>8.3f}  {r.last(agent, 'draw'):>9.3f}  {r.last(agent, 'length'):>8.2f}  "
                  f"{r.agents[agent]['elo'][-1]:>7.1f}  {win:>15}  {rew:>15}  {ok}")
    print(f"\n{'seed':>4}  {'score max dev':>13}  {'at step':>7}  {'final dev':>9}  {'back toward 50%':>15}  "
          f"{'s/step':>6}  {'RL s':>5}  {'SFT s':>5}  {'warm-up invalid':>15}")
    for r in results:
        back = abs(r.final_deviation) < abs(r.max_deviation)
        print(f"{r.seed:>4}  {r.max_deviation:>+13.3f}  {r.max_deviation_step:>7}  {r.final_deviation:>+9.3f}  "
              f"{'yes' if back else 'no':>15}  {r.seconds_per_step:>6.1f}  {r.seconds:>5.0f}  "
              f"{r.sft_seconds:>5.0f}  {r.warmup_invalid:>15.3f}")
    probed = [r for r in results if r.probe]
    if probed:
        print("\nNext-move probability mass on held-out positions (off the board / on a taken cell / on an "
              "empty cell;\ntaken share = taken / (taken + empty), blind = that share for a policy that ignores "
              "the board):")
        for r in probed:
            for label, shares in r.probe.items():
                print(f"{r.seed:>4}  {label:>7}  off {shares['off']:.3f}  taken {shares['taken']:.3f}  "
                      f"empty {shares['empty']:.3f}  taken share {shares['taken_share']:.3f}  "
                      f"blind {shares['blind']:.3f}")


def svg_plot(results: list[RunResult], width: int = 900, panel: int = 200) -> str:
    """Three panels per seed: alpha's score vs beta (raw and smoothed, 50% line), both agents'
    invalid-move rates, both Elo ratings."""
    colours = {AGENTS[0]: "#1f77b4", AGENTS[1]: "#d62728"}
    left, gap, top = 60, 40, 30
    plot_w = width - left - 20
    height = top + len(results) * 3 * (panel + gap) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>',
             f'<text x="{left}" y="18" font-size="14">Gomoku self-play: alpha vs beta '
             f'(ROUND_ROBIN, both colours every step)</text>']

    def panel_svg(y0: float, title: str, series: list[tuple[str, list[float], str, str]],
                  low: float, high: float, steps: int, guide: float | None) -> None:
        def px(i: int) -> float:
            return left + plot_w * (i / max(1, steps - 1))

        def py(v: float) -> float:
            return y0 + panel - panel * ((v - low) / (high - low) if high > low else 0.5)

        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel}" fill="none" stroke="#999"/>')
        parts.append(f'<text x="{left}" y="{y0 - 5}">{title}</text>')
        for value in (low, (low + high) / 2, high):
            parts.append(f'<text x="{left - 5}" y="{py(value) + 4:.1f}" text-anchor="end">{value:.2f}</text>')
        parts.append(f'<text x="{left + plot_w}" y="{y0 + panel + 14}" text-anchor="end">step {steps}</text>')
        if guide is not None:
            parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{py(guide):.1f}" y2="{py(guide):.1f}" '
                         f'stroke="#666" stroke-dasharray="4,3"/>')
        for index, (label, values, colour, dash) in enumerate(series):
            points = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(values))
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5" '
                         f'stroke-dasharray="{dash}"/>')
            parts.append(f'<text x="{left + 10 + 150 * index}" y="{y0 + 14}" fill="{colour}">{label}</text>')

    y = top + 20
    for r in results:
        steps = r.steps
        panel_svg(y, f"seed {r.seed}: alpha's score vs beta (win + draw/2); dashed = 50%",
                  [("alpha score", r.score, "#aaaaaa", "2,2"),
                   (f"moving average ({r.smooth})", r.smoothed_score, colours[AGENTS[0]], "")],
                  0.0, 1.0, steps, 0.5)
        y += panel + gap
        panel_svg(y, f"seed {r.seed}: invalid-move rate",
                  [(agent, r.agents[agent]["invalid"], colours[agent], "") for agent in AGENTS],
                  0.0, max(0.1, *(v for a in AGENTS for v in r.agents[a]["invalid"])), steps, None)
        y += panel + gap
        elos = [v for a in AGENTS for v in r.agents[a]["elo"]]
        spread = max(10.0, *(abs(v - 1000.0) for v in elos))
        panel_svg(y, f"seed {r.seed}: Elo (sum 2000)",
                  [(agent, r.agents[agent]["elo"], colours[agent], "") for agent in AGENTS],
                  1000.0 - spread, 1000.0 + spread, steps, 1000.0)
        y += panel + gap
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--scheduler", help="an existing stack's scheduler (default: start a private stack)")
    p.add_argument("--base-port", type=int, default=41300, help="ports of the private stack")
    p.add_argument("--window", type=int, default=10, help="steps averaged at the start and the end")
    p.add_argument("--smooth", type=int, default=5, help="moving-average width of the score curve")
    p.add_argument("--max-ratio", type=float, default=0.5, help="last window's invalid rate <= this x the first")
    p.add_argument("--min-drop", type=float, default=0.1, help="and lower by at least this much")
    for item in fields(GameConfig):
        p.add_argument(f"--{item.name.replace('_', '-')}", type=type(getattr(GameConfig(), item.name)),
                       default=getattr(GameConfig(), item.name), help="game (default %(default)s)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "gomoku_selfplay")
    for item in fields(Recipe):
        if item.name != "game":
            p.add_argument(f"--{item.name.replace('_', '-')}", type=type(getattr(Recipe(), item.name)),
                           default=getattr(Recipe(), item.name), help="recipe (default %(default)s)")
    return p.parse_args(argv)


def recipe_from(args: argparse.Namespace) -> Recipe:
    chosen = {item.name: getattr(args, item.name) for item in fields(Recipe) if item.name != "game"}
    game = GameConfig(**{item.name: getattr(args, item.name) for item in fields(GameConfig)})
    return Recipe(game=game, **chosen)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recipe = recipe_from(args)
    with bench_stack(args.scheduler, args.base_port, args.out / "stack") as stack:
        root = stack.state_dir / "checkpoints" if stack.state_dir else None
        results = [run_seed(stack.scheduler, seed, args.out, recipe, window=args.window, smooth=args.smooth,
                            api_key=stack.api_key, checkpoint_root=root) for seed in args.seeds]
    print()
    print_table(results, args)
    passing = [r for r in results if all(r.invalid_fell(a, args.max_ratio, args.min_drop) for a in AGENTS)]
    returned = [r for r in results if abs(r.final_deviation) < abs(r.max_deviation)]
    verdict = "PASS" if len(passing) == len(results) else "MISS"
    print(f"\nPASS criterion: for each agent, mean invalid-move rate of the last {args.window} steps "
          f"<= {args.max_ratio} x the first {args.window} and lower by >= {args.min_drop}.")
    print(f"{len(passing)}/{len(results)} seeds met it: {verdict}")
    print(f"Score curve (alpha vs beta, moving average of {args.smooth}): largest deviation from 50% "
          + ", ".join(f"seed {r.seed} {r.max_deviation:+.3f} at step {r.max_deviation_step}" for r in results)
          + "; at the end " + ", ".join(f"seed {r.seed} {r.final_deviation:+.3f}" for r in results)
          + f"; {len(returned)}/{len(results)} ended closer to 50% than their largest deviation (reported, "
          "not required: competitive dynamics are stochastic).")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plot.svg").write_text(svg_plot(results))
    (args.out / "results.json").write_text(json.dumps(
        {"recipe": asdict(recipe), "criteria": {"window": args.window, "max_ratio": args.max_ratio,
                                                "min_drop": args.min_drop, "smooth": args.smooth},
         "results": [asdict(r) | {"score": r.score, "smoothed_score": r.smoothed_score,
                                  "max_deviation": r.max_deviation, "max_deviation_step": r.max_deviation_step,
                                  "final_deviation": r.final_deviation, "seconds_per_step": r.seconds_per_step,
                                  "invalid_first": {a: r.first(a) for a in AGENTS},
                                  "invalid_last": {a: r.last(a) for a in AGENTS}}
                     for r in results],
         "verdict": verdict}, indent=2) + "\n")
    print(f"wrote {args.out / 'results.json'} and {args.out / 'plot.svg'}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
