"""The built-in `guess_number` game: find a secret integer in a few turns, with dense feedback.

Each episode hides a secret in `low..high` (default 1..16). The model replies with a number
each turn; the game answers "higher" (the secret is larger than the guess), "lower" (it is
smaller) or "correct", which ends the episode. After `max_turns` turns (default 6) the
episode ends anyway. Prompts are deliberately short (a byte-level tokenizer spends a token per
character): the system prompt is "Guess the number. Reply with a number only.", the initial
user message is empty and reset's observation is e.g. "Guess 1 to 16.".

    >>> from opentinker_env import play
    >>> from opentinker_runtime.games.guess_number_game import GuessNumberGame
    >>> game = GuessNumberGame(seed=0)
    >>> game.reset(index=3)
    'Guess 1 to 16.'
    >>> episode = play(game, ["8", "4", "I guess 6", "7"], index=3)
    >>> [result.observation for result in episode.results]
    ['lower', 'higher', 'higher', 'correct']
    >>> episode.results[-1].info["secret"], episode.results[-1].info["turns"]
    (7, 4)
    >>> round(episode.total_reward, 6)  # 1 for finding it + the full progress bonus 0.2
    1.2

Reading a guess: `opentinker_env.answers.extract_answer` (the last `\\boxed{}`, else the
last "answer: X", else the last number in the text), which must be an integer ("1,024" and
"7.0" count, "3.5" and "seven" do not); otherwise the reply is unparseable.

Rewards (N = high - low + 1; [lo, hi] is the still-possible interval before the guess, i.e.
what the earlier hints have not ruled out, of size n = hi - lo + 1; n' is its size after the
guess, 1 once the secret is found):

    correct guess:                       1.0 + progress_reward * (n - 1)  / (N - 1)
    wrong guess inside [lo, hi]:               progress_reward * (n - n') / (N - 1)   (> 0)
    guess outside [lo, hi] (already ruled
      out, or outside low..high), a repeated
      guess, or an unparseable reply:         -penalty

The shaping term is potential-based (the potential is -progress_reward * (n - 1) / (N - 1)),
so it telescopes: an episode's total is

    1.0 * found + progress_reward * (N - n_end) / (N - 1) - penalty * bad_turns

with n_end the final interval size (1 when found). It lies in
[-penalty * max_turns, 1.0 + progress_reward] and is positive only when some guess narrowed
the interval. A guess that halves the interval earns more than one that nibbles at its edge.
Running out of turns ends the episode with no win reward: the last step earns only its own
shaping term. Defaults: progress_reward 0.2, penalty 0.1.

Secrets: train secret i is drawn from the random stream seeded "<seed>/train" at index i
(unbounded), eval secret i (i < eval_size) from the separate stream "<seed>/eval". The two
streams are independent, but with so few possible numbers the values overlap: the eval split
measures the search strategy on episodes not trained on, not unseen numbers.
"""

from __future__ import annotations

import random
from typing import Any

from opentinker_env.answers import extract_answer, normalize_answer
from opentinker_env.data import SeededGenerator
from opentinker_env.config_fields import finite
from opentinker_env.config_fields import integer as _int
from opentinker_env.config_fields import reset_position
from opentinker_env.config_fields import text as _text
from opentinker_env.game import SPLITS, AbstractGame, GameConfigError, StepResult

DEFAULT_SYSTEM_PROMPT = "Guess the number. Reply with a number only."
DEFAULT_EVAL_SIZE = 32
WIN_REWARD = 1.0
HIGHER, LOWER, CORRECT, UNPARSEABLE = "higher", "lower", "correct", "number?"


class GuessNumberGame(AbstractGame):
    """Multi-turn number guessing: reply with a number, hear "higher"/"lower"; reward 1 for finding it."""

    multi_turn = True

    def __init__(self, *, low: int = 1, high: int = 16, max_turns: int = 6, seed: int = 0,
                 eval_size: int = DEFAULT_EVAL_SIZE, progress_reward: float = 0.2, penalty: float = 0.1,
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT) -> None:
        """The secret lies in `low..high` (at least two numbers); `max_turns` guesses per episode.
        `progress_reward` is the shaping earned by narrowing the interval down to the secret,
        `penalty` what each wasted turn costs (see the module docstring for the formula)."""
        self.low = _int("low", low)
        self.high = _int("high", high)
        if self.high <= self.low:
            raise GameConfigError(f"high: expected an integer > low ({self.low}), got {self.high}")
        self.max_turns = _int("max_turns", max_turns, low=1)
        self.seed = _int("seed", seed)
        self.eval_size = _int("eval_size", eval_size, low=1)
        self.progress_reward = finite("progress_reward", progress_reward, low=0)
        self.penalty = finite("penalty", penalty, low=0)
        self.system_prompt = _text("system_prompt", system_prompt)
        self._streams = {split: SeededGenerator(self._draw, seed=f"{self.seed}/{split}") for split in SPLITS}
        self.next_index = {split: 0 for split in SPLITS}
        self.split, self.index = "train", 0
        self.secret: int | None = None
        self.interval = (self.low, self.high)
        self.guesses: list[int] = []
        self.turns = 0

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        return {"low": 1, "high": 16, "max_turns": 6, "seed": 0, "eval_size": DEFAULT_EVAL_SIZE,
                "progress_reward": 0.2, "penalty": 0.1}

    def get_system_prompt(self) -> str:
        return self.system_prompt

    def get_initial_user_message(self) -> str:
        return ""

    def secret_for(self, split: str, index: int) -> int:
        """The secret of episode `index` of `split` (what `reset(index=..., split=...)` picks)."""
        if split not in SPLITS:
            raise GameConfigError(f"split: expected 'train' or 'eval', got {split!r}")
        index = _int("index", index, low=0)
        if split == "eval" and index >= self.eval_size:
            raise GameConfigError(f"index: the eval split has {self.eval_size} secrets "
                                  f"(0..{self.eval_size - 1}), got {index}")
        return self._streams[split][index]

    def reset(self, *, index: int | None = None, split: str = "train", seed: int | None = None) -> str:
        """Episode `index` of `split` ("train" or "eval"); without an index, `seed` is used as
        the index (modulo eval_size for eval), else the next episode of that split."""
        position = self._position(split, index, seed)
        self.secret = self.secret_for(split, position)
        self.split, self.index = split, position
        self.next_index[split] = position + 1
        self.interval = (self.low, self.high)
        self.guesses = []
        self.turns = 0
        return f"Guess {self.low} to {self.high}."

    def step(self, action: str) -> StepResult:
        if self.secret is None:
            raise RuntimeError("step() before reset()")
        secret = self.secret
        self.turns += 1
        guess = parse_guess(action)
        lo, hi = self.interval
        size = hi - lo + 1
        if guess is None:
            kind, reward, hint = "unparseable", -self.penalty, UNPARSEABLE
        else:
            hint = CORRECT if guess == secret else HIGHER if secret > guess else LOWER
            if guess in self.guesses:
                kind, reward = "repeated", -self.penalty
            elif not lo <= guess <= hi:
                kind, reward = "outside", -self.penalty
            else:
                if guess != secret:
                    self.interval = (guess + 1, hi) if secret > guess else (lo, guess - 1)
                new_size = 1 if guess == secret else self.interval[1] - self.interval[0] + 1
                kind = "correct" if guess == secret else "progress"
                reward = self.progress_reward * (size - new_size) / (self.high - self.low)
                if guess == secret:
                    reward += WIN_REWARD
            self.guesses.append(guess)
        correct = kind == "correct"
        done = correct or self.turns >= self.max_turns
        info: dict[str, Any] = {"turn": self.turns, "guess": guess, "kind": kind,
                                "interval": list(self.interval)}
        if done:
            info.update(correct=correct, turns=self.turns, secret=secret, split=self.split, index=self.index)
            self.secret = None
        return StepResult(observation=hint, reward=reward, done=done, info=info)

    def _draw(self, rng: random.Random, _: int) -> int:
        return rng.randint(self.low, self.high)

    def _position(self, split: str, index: int | None, seed: int | None) -> int:
        return reset_position(split, index, seed, next_index=self.next_index.get(split, 0),
                              eval_size=self.eval_size)


def parse_guess(text: str) -> int | None:
    """The integer a reply names (see the module docstring), or None."""
    extracted = extract_answer(text)
    if extracted is None:
        return None
    normalized = normalize_answer(extracted)
    try:
        return int(normalized)
    except ValueError:
        return None
