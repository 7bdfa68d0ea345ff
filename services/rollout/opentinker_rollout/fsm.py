"""The agent-loop state machine that plays one episode (after verl's tool_agent_loop).

    PENDING -> GENERATING -> INTERACTING -> GENERATING -> ... -> TERMINATED

`run` loops `state = await handler(episode)` until TERMINATED; each handler does one thing
and returns the next state, and all per-episode data lives in the `Episode`:

- PENDING opens the environment session, resets it and renders the opening messages
  ([system, user] per the prompt rule) with the chat template and generation prompt; mask 0.
  A reset that says done (a match that finished before this seat's first turn) terminates
  the episode at once with DONE: no action is sampled, the reset's reward is its total.
- GENERATING samples one action through the batcher and appends its tokens exactly as
  sampled (mask 1, sampling logprobs kept; never re-tokenized). An action cut off by a token
  limit (the per-turn budget, the episode's total or the context window) is marked
  `truncated`. By default (limits JUDGED) it still goes to INTERACTING: the environment judges
  it (`step(action, truncated=True)`: the game's `on_truncated`, by default its `step`), so a
  reply that rambles to the limit scores like any other bad reply instead of a free 0. With
  END_EPISODE the episode ends there without an environment step (MAX_TURN_TOKENS,
  MAX_TOTAL_TOKENS or CONTEXT_LENGTH), except that a session that `accepts_truncated_actions`
  (a match: leaving would forfeit it and waste the other seats' episodes) is still stepped
  with an action cut by the per-turn budget alone. Either way a cut turn's reward gets the
  limits' `truncation_penalty` (<= 0) added.
- INTERACTING sends the decoded action to the environment and records the reward. If the
  episode goes on, the observation turn's tokens are appended (mask 0, logprob 0); a final
  observation (done, the turn limit reached, or no room left after a cut by the total or
  context limit) is kept as text only.

Match episodes (multi-agent) run the same machine over a `match_client.MatchSession`: reset
joins the seat and waits for its first turn, each step submits the action and waits for the
seat's next turn, so the other seats' moves arrive as (mask 0) observations while they think.

Environment failures end the episode with ENV_ERROR, the wall-clock limit with TIMEOUT (ENV_ERROR
when it runs out while the environment is answering: a hung game).
The session is closed whatever happened (a match session left unfinished forfeits its seat).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from opentinker_env.game import opening_messages
from opentinker_rollout.batcher import BatchedGeneration
from opentinker_rollout.engine import FinishReason, GenerationRequest, SamplingConfig, derive_seed
from opentinker_rollout.environment import EnvironmentFailure, EnvironmentSession
from opentinker_rollout.episode import AgentState, Episode, EpisodeLimits, StopReason, TruncatedActions, Turn

log = structlog.get_logger(__name__)
CLOSE_TIMEOUT_S = 5.0
WAITING_ON_ENVIRONMENT = (AgentState.PENDING, AgentState.INTERACTING)
"""States whose time is the environment's (open/reset, step): the time limit running out there
fails the episode (ENV_ERROR, never trained on) instead of cutting it (TIMEOUT)."""


class ChatRenderer(Protocol):
    """Turns chat text into the exact token ids the model sees, and actions back into text."""

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The opening messages with the chat template and the assistant generation prompt."""

    def observation(self, text: str, action_ids: Sequence[int]) -> list[int]:
        """Tokens after a sampled action: close the assistant turn (unless the action's own
        last token did), the user turn with `text`, and the next generation prompt."""

    def action_text(self, action_ids: Sequence[int]) -> str:
        """The action as the environment sees it (special tokens removed)."""

    def decode(self, token_ids: Sequence[int]) -> str:
        """Token ids as text, special tokens kept (the prompt as the model saw it)."""


class Generator(Protocol):
    async def generate(self, request: GenerationRequest) -> BatchedGeneration: ...


@dataclass(frozen=True, kw_only=True)
class AgentLoopConfig:
    sampling: SamplingConfig
    limits: EpisodeLimits
    max_context_length: int


Handler = Callable[[Episode], Awaitable[AgentState]]


class AgentLoop:
    """Plays one episode against one environment session."""

    def __init__(self, *, generator: Generator, renderer: ChatRenderer,
                 environment: EnvironmentSession, config: AgentLoopConfig) -> None:
        self.generator = generator
        self.renderer = renderer
        self.environment = environment
        self.config = config
        self._state = AgentState.PENDING
        self.handlers: dict[AgentState, Handler] = {
            AgentState.PENDING: self.pending,
            AgentState.GENERATING: self.generating,
            AgentState.INTERACTING: self.interacting,
        }

    async def run(self, episode: Episode) -> Episode:
        """Play until TERMINATED; the episode always has a stop reason afterwards."""
        try:
            async with asyncio.timeout(self.config.limits.timeout_s):
                await self._loop(episode)
        except TimeoutError:
            if self._state in WAITING_ON_ENVIRONMENT:  # a hung game: not the policy's doing
                episode.env_error = (f"the environment did not answer within the episode's time limit "
                                     f"({self.config.limits.timeout_s:g} s, {self._state.name})")
                log.warning("episode_env_error", trajectory_id=episode.trajectory_id, error=episode.env_error)
                episode.finish(StopReason.ENV_ERROR)
            else:
                episode.finish(StopReason.TIMEOUT)
        except EnvironmentFailure as failure:
            episode.env_error, episode.env_traceback = str(failure), failure.traceback
            log.warning("episode_env_error", trajectory_id=episode.trajectory_id, error=str(failure))
            episode.finish(StopReason.ENV_ERROR)
        finally:
            await _close_quietly(self.environment)
        return episode

    async def _loop(self, episode: Episode) -> None:
        self._state = AgentState.PENDING
        while self._state is not AgentState.TERMINATED:
            self._state = await self.handlers[self._state](episode)

    async def pending(self, episode: Episode) -> AgentState:
        await self.environment.open()
        reset = await self.environment.reset(episode.reset_kwargs, episode.env_seed)
        episode.reset_reward, episode.reset_info = reset.reward, reset.info
        messages = opening_messages(reset.system_prompt, reset.initial_user_message,
                                    reset.observation)
        prompt_ids = self.renderer.prompt(messages)
        episode.append_context(prompt_ids)
        episode.prompt_length = len(prompt_ids)
        episode.prompt_text = self.renderer.decode(prompt_ids)
        if reset.done:
            episode.finish(StopReason.DONE)
            return AgentState.TERMINATED
        return self._room_or_stop(episode)

    async def generating(self, episode: Episode) -> AgentState:
        budget, budget_reason = self._budget(episode)
        sampling = replace(self.config.sampling, max_new_tokens=budget, n=1,
                           seed=_turn_seed(episode))
        request = GenerationRequest(prompt_ids=tuple(episode.token_ids), sampling=sampling)
        answer = await self.generator.generate(request)
        generation = answer.generations[0]
        start = len(episode.token_ids)
        episode.append_sampled(list(generation.token_ids), list(generation.logprobs))
        episode.policy_version_now = answer.policy_version
        episode.turns.append(Turn(
            turn_index=len(episode.turns), action_start=start, action_end=len(episode.token_ids),
            action_text=self.renderer.action_text(generation.token_ids),
            policy_version=answer.policy_version,
            observation_start=len(episode.token_ids), observation_end=len(episode.token_ids)))
        finish = generation.finish_reason
        if finish is FinishReason.STOP:
            return AgentState.INTERACTING
        cut_by = StopReason.CONTEXT_LENGTH if finish is FinishReason.CONTEXT else budget_reason
        turn = episode.turns[-1]
        turn.truncated = True
        if self._judged_when_cut(cut_by):
            return AgentState.INTERACTING
        turn.reward = self.config.limits.truncation_penalty
        episode.finish(cut_by)
        return AgentState.TERMINATED

    async def interacting(self, episode: Episode) -> AgentState:
        turn = episode.turns[-1]
        if turn.truncated:
            outcome = await self.environment.step(turn.action_text, truncated=True)
        else:
            outcome = await self.environment.step(turn.action_text)
        turn.reward = outcome.reward + (self.config.limits.truncation_penalty if turn.truncated else 0.0)
        turn.info, turn.observation_text = outcome.info, outcome.observation
        if outcome.done:
            episode.finish(StopReason.DONE)
            return AgentState.TERMINATED
        if 0 < self.config.limits.max_turns <= len(episode.turns):
            episode.finish(StopReason.MAX_TURNS)
            return AgentState.TERMINATED
        action_ids = episode.token_ids[turn.action_start:turn.action_end]
        observation_ids = self.renderer.observation(outcome.observation, action_ids)
        room, reason = self._episode_room(episode)
        if room - len(observation_ids) <= 0:
            episode.finish(reason)
            return AgentState.TERMINATED
        episode.append_context(observation_ids)
        turn.observation_end = len(episode.token_ids)
        return AgentState.GENERATING

    def _judged_when_cut(self, cut_by: StopReason) -> bool:
        """Whether the environment judges an action cut off by `cut_by` (see the module doc)."""
        if self.config.limits.truncated_actions is TruncatedActions.JUDGED:
            return True
        return (cut_by is StopReason.MAX_TURN_TOKENS
                and bool(getattr(self.environment, "accepts_truncated_actions", False)))

    def _room_or_stop(self, episode: Episode) -> AgentState:
        budget, reason = self._budget(episode)
        if budget > 0:
            return AgentState.GENERATING
        episode.finish(reason)
        return AgentState.TERMINATED

    def _episode_room(self, episode: Episode) -> tuple[int, StopReason]:
        """Tokens the episode may still add before the context or total limit, and which binds."""
        context, total, _ = self._limit_rooms(episode)
        if context <= total:
            return context, StopReason.CONTEXT_LENGTH
        return total, StopReason.MAX_TOTAL_TOKENS

    def _limit_rooms(self, episode: Episode) -> tuple[int, int, int]:
        """(context room, total-token room, per-turn budget); no-limit = a large number."""
        used = len(episode.token_ids)
        limits, unlimited = self.config.limits, 1 << 62
        total = limits.max_total_tokens - used if limits.max_total_tokens > 0 else unlimited
        per_turn = min(n for n in (limits.max_new_tokens_per_turn,
                                   self.config.sampling.max_new_tokens, unlimited) if n > 0)
        return self.config.max_context_length - used, total, per_turn

    def _budget(self, episode: Episode) -> tuple[int, StopReason]:
        """New tokens the next action may have, and the stop reason when it uses them all.

        Ties go to the episode-wide limits (context, then total), which end the episode anyway.
        """
        context, total, per_turn = self._limit_rooms(episode)
        options = [(context, StopReason.CONTEXT_LENGTH), (total, StopReason.MAX_TOTAL_TOKENS),
                   (per_turn, StopReason.MAX_TURN_TOKENS)]
        budget, reason = min(options, key=lambda option: option[0])
        return max(0, budget), reason


def _turn_seed(episode: Episode) -> int:
    """Seeded episodes get a different, reproducible seed per turn."""
    if not episode.sampling_seed:
        return 0
    return derive_seed(episode.sampling_seed, len(episode.turns))


async def _close_quietly(environment: EnvironmentSession) -> None:
    """Close within CLOSE_TIMEOUT_S; a failing close does not change the episode."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await environment.close()
