"""Real games for the rollout tests: an in-process `EnvironmentSession` over an `AbstractGame`,
and helpers to play whole episodes through the real agent loop and chat renderer."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentinker_env.game import AbstractGame
from opentinker_rollout.engine import FinishReason, SamplingConfig
from opentinker_rollout.environment import EnvironmentFailure, ResetResult, StepOutcome
from opentinker_rollout.episode import Episode, EpisodeLimits
from opentinker_rollout.fsm import AgentLoop, AgentLoopConfig
from opentinker_rollout.rendering import TokenizerRenderer
from tests.rollout._support import EOS, ScriptedGenerator, tiny_model

SCRIPTED_LOGPROB = -0.5
"""The logprob `ScriptedGenerator` reports for every token it returns."""


@dataclass(kw_only=True)
class GameSession:
    """An `EnvironmentSession` that runs a game's reset/step directly (no EnvHost).

    As the EnvHost does, a nonzero seed is passed as `seed=` unless the kwargs name one, and
    any exception from the game becomes an `EnvironmentFailure` with its traceback.
    """

    game: AbstractGame
    actions: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    async def open(self) -> None:
        self.calls.append("open")

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        self.calls.append("reset")
        arguments = dict(kwargs)
        if seed:
            arguments.setdefault("seed", seed)
        observation = self._call(lambda: self.game.reset(**arguments))
        return ResetResult(system_prompt=self.game.get_system_prompt(),
                           initial_user_message=self.game.get_initial_user_message(),
                           observation=observation)

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        self.calls.append("step")
        self.actions.append(action)
        result = self._call(lambda: self.game.on_truncated(action) if truncated else self.game.step(action))
        return StepOutcome(observation=result.observation, reward=result.reward,
                           done=result.done, info=result.info)

    async def close(self) -> None:
        self.calls.append("close")
        self.game.close()

    @staticmethod
    def _call(function: Any) -> Any:
        try:
            return function()
        except Exception as error:
            raise EnvironmentFailure(f"{type(error).__name__}: {error}",
                                     traceback=traceback.format_exc()) from error


def tokenizer() -> Any:
    """The builtin tiny-llama's byte-level ChatML tokenizer (eos <|im_end|> = EOS)."""
    return tiny_model().tokenizer


def encode(text: str) -> list[int]:
    """Token ids of `text`; special-token text such as "<|im_end|>" becomes its one id."""
    return list(tokenizer().encode(text, add_special_tokens=False))


def action(text: str, *, eos: bool = True) -> tuple[list[int], FinishReason]:
    """A scripted model turn: the tokens of `text`, closed by EOS unless it stopped on a stop
    string (finish reason STOP either way)."""
    return [*encode(text), *([EOS] if eos else [])], FinishReason.STOP


def play(game: AbstractGame, script: Sequence[tuple[list[int], FinishReason]], *,
         reset_kwargs: Mapping[str, Any] | None = None, limits: EpisodeLimits = EpisodeLimits(),
         context: int = 2048, max_new_tokens: int = 64
         ) -> tuple[Episode, ScriptedGenerator, GameSession]:
    """One episode of `game` through the real AgentLoop and TokenizerRenderer."""
    generator = ScriptedGenerator(script)
    session = GameSession(game=game)
    config = AgentLoopConfig(sampling=SamplingConfig(max_new_tokens=max_new_tokens),
                             limits=limits, max_context_length=context)
    loop = AgentLoop(generator=generator, renderer=TokenizerRenderer(tokenizer()),
                     environment=session, config=config)
    episode = Episode(group_id="g", episode_index=0, reset_kwargs=dict(reset_kwargs or {}))
    return asyncio.run(loop.run(episode)), generator, session
