"""The built-in `nim` game: take stones from a pile against a scripted random opponent.

A pile of `min_stones..max_stones` stones; the model moves first and each turn takes 1 to
`max_take` of them (never more than are left), then the opponent takes a uniformly random
legal number. Whoever takes the last stone wins. The opponent is part of the environment, so
this is a two-player game played as a single-agent episode (for a multi-agent match between
models see `gomoku`).

    >>> from opentinker_env import play
    >>> from opentinker_runtime.games.nim_game import NimGame
    >>> game = NimGame(seed=0)
    >>> game.reset(index=0)
    'Stones: 13. Take 1 to 3.'
    >>> episode = play(game, ["1", "2", "2", "2"], index=0)  # always leave a multiple of 4
    >>> [result.observation for result in episode.results][:2]
    ['I took 2. Stones: 10. Take 1 to 3.', 'I took 2. Stones: 6. Take 1 to 3.']
    >>> episode.results[-1].observation, episode.results[-1].reward, episode.results[-1].info["win"]
    ('You took the last stone: you win.', 1.0, True)

Strategy: leaving the opponent a multiple of `max_take + 1` stones wins against any opponent;
a random opponent also throws away many positions the model could not force. A player that
takes a random legal number wins about half its games; one that plays the multiple-of-four
rule wins almost all (from a start that is a multiple of four it must wait for the opponent's
first mistake).

Replies: the number a reply names (`opentinker_env.answers.extract_answer`, as guess_number).
A reply that names no whole number, takes fewer than 1 or more than `max_take` stones, or more
than are left, is illegal: the model loses at once (reward `loss_reward`). So does a reply cut
off by the token limit (the default `on_truncated` is `step`: a cut reply is judged like any
other, and rambling never beats playing).

Rewards: `win_reward` (1) when the model takes the last stone, `loss_reward` (-1) when the
opponent does or the model's move is illegal, 0 for every other turn. The final step's info
has "win", "illegal", "correct" (= win: the job's `accuracy` metric), "outcome" ("win" or
"loss"), "split" and "index"; every step's info has "illegal" (0/1) and "stones_left", so
`env/illegal`, `env/win` and `env/stones_left` become job metrics (every numeric info value
does, except the episode's identity: `index`, `split`, `seed`).

Episodes are deterministic for a given (split, index, seed): the start comes from the random
stream seeded "<seed>/<split>" at `index`, and the opponent's moves from one seeded
"<seed>/<split>/<index>".
"""

from __future__ import annotations

import random
from typing import Any

from opentinker_env.answers import extract_answer, normalize_answer
from opentinker_env.config_fields import finite
from opentinker_env.config_fields import integer as _int
from opentinker_env.config_fields import reset_position
from opentinker_env.config_fields import text as _text
from opentinker_env.data import SeededGenerator
from opentinker_env.game import SPLITS, AbstractGame, GameConfigError, StepResult

DEFAULT_SYSTEM_PROMPT = "Play Nim. Whoever takes the last stone wins. Reply with a number only."
DEFAULT_EVAL_SIZE = 64


class NimGame(AbstractGame):
    """Nim against a random opponent: take 1-3 stones a turn; taking the last one wins."""

    multi_turn = True

    def __init__(self, *, min_stones: int = 7, max_stones: int = 15, max_take: int = 3, seed: int = 0,
                 eval_size: int = DEFAULT_EVAL_SIZE, win_reward: float = 1.0, loss_reward: float = -1.0,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> None:
        """Piles start with `min_stones..max_stones` stones; a turn takes 1..`max_take`."""
        self.min_stones = _int("min_stones", min_stones, low=1)
        self.max_stones = _int("max_stones", max_stones, low=self.min_stones)
        if self.max_stones > 1000:
            raise GameConfigError(f"max_stones: expected at most 1000, got {self.max_stones}")
        self.max_take = _int("max_take", max_take, low=1)
        self.seed = _int("seed", seed)
        self.eval_size = _int("eval_size", eval_size, low=1)
        self.win_reward = finite("win_reward", win_reward)
        self.loss_reward = finite("loss_reward", loss_reward)
        self.system_prompt = _text("system_prompt", system_prompt)
        self._starts = {split: SeededGenerator(self._draw, seed=f"{self.seed}/{split}") for split in SPLITS}
        self.next_index = {split: 0 for split in SPLITS}
        self.split, self.index = "train", 0
        self.stones = self.start = 0
        self.opponent = random.Random()
        self.playing = False

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"min_stones": 7, "max_stones": 15, "max_take": 3, "seed": 0, "eval_size": DEFAULT_EVAL_SIZE,
                "win_reward": 1.0, "loss_reward": -1.0}

    def get_system_prompt(self) -> str:
        return self.system_prompt

    def get_initial_user_message(self) -> str:
        return ""

    def start_for(self, split: str, index: int) -> int:
        """The pile episode `index` of `split` starts with."""
        if split not in SPLITS:
            raise GameConfigError(f"split: expected 'train' or 'eval', got {split!r}")
        index = _int("index", index, low=0)
        if split == "eval" and index >= self.eval_size:
            raise GameConfigError(f"index: the eval split has {self.eval_size} games "
                                  f"(0..{self.eval_size - 1}), got {index}")
        return self._starts[split][index]

    def reset(self, *, index: int | None = None, split: str = "train", seed: int | None = None) -> str:
        """Game `index` of `split` ("train" or "eval"); without an index, `seed` is used as the
        index (modulo eval_size for eval), else the next game of that split."""
        position = reset_position(split, index, seed, next_index=self.next_index.get(split, 0),
                                  eval_size=self.eval_size)
        self.start = self.stones = self.start_for(split, position)
        self.split, self.index = split, position
        self.next_index[split] = position + 1
        self.opponent = random.Random(f"{self.seed}/{split}/{position}")
        self.playing = True
        return self._prompt()

    def step(self, action: str) -> StepResult:
        if not self.playing:
            raise RuntimeError("step() before reset()")
        take = parse_take(action)
        if take is None or not 1 <= take <= min(self.max_take, self.stones):
            return self._end(win=False, illegal=True,
                             observation=f"Illegal move: take 1 to {min(self.max_take, self.stones)}. You lose.")
        self.stones -= take
        if self.stones == 0:
            return self._end(win=True, illegal=False, observation="You took the last stone: you win.")
        reply = self.opponent.randint(1, min(self.max_take, self.stones))
        self.stones -= reply
        if self.stones == 0:
            return self._end(win=False, illegal=False, observation=f"I took {reply}, the last stone: you lose.")
        return StepResult(observation=f"I took {reply}. {self._prompt()}",
                          info={"illegal": False, "stones_left": self.stones})

    def _prompt(self) -> str:
        return f"Stones: {self.stones}. Take 1 to {min(self.max_take, self.stones)}."

    def _end(self, *, win: bool, illegal: bool, observation: str) -> StepResult:
        self.playing = False
        info = {"illegal": illegal, "stones_left": self.stones, "win": win, "correct": win,
                "outcome": "win" if win else "loss", "split": self.split, "index": self.index}
        return StepResult(observation=observation, reward=self.win_reward if win else self.loss_reward,
                          done=True, info=info)

    def _draw(self, rng: random.Random, _: int) -> int:
        return rng.randint(self.min_stones, self.max_stones)


def parse_take(text: str) -> int | None:
    """The whole number a reply names, or None."""
    extracted = extract_answer(text)
    if extracted is None:
        return None
    try:
        return int(normalize_answer(extracted))
    except ValueError:
        return None


def best_take(stones: int, max_take: int = 3) -> int:
    """The move that leaves a multiple of max_take + 1 (a losing pile for the player to move),
    or 1 when there is none (the pile already is one)."""
    return stones % (max_take + 1) or 1
