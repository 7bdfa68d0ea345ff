"""Core types of the agent loop: states, stop reasons, limits, turns, the episode and its trajectory.

Per-token lists of an `Episode` always have the length of `token_ids`; index t describes
token t: `loss_mask[t]` is 1 where the policy sampled the token (0 on prompt and observation
tokens) and `sampling_logprobs[t]` is its logprob under the sampling distribution (0 where
the mask is 0).

A match episode (multi-agent) plays one seat of a Coordinator match as one agent: its
trajectory names the match, the seat, the agent and the seat's outcome ("win", "loss", ...),
and only this agent's own actions are sampled tokens; the other seats' moves arrive in its
observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any


class AgentState(Enum):
    PENDING = "pending"            # open the environment, render the prompt
    GENERATING = "generating"      # the policy samples one action (loss mask 1)
    INTERACTING = "interacting"    # the environment answers (observation, loss mask 0)
    TERMINATED = "terminated"


class StopReason(StrEnum):
    DONE = "done"                            # the environment said done
    MAX_TURNS = "max_turns"
    MAX_TURN_TOKENS = "max_turn_tokens"      # an action hit the per-turn token limit
    MAX_TOTAL_TOKENS = "max_total_tokens"    # the episode hit its total token limit
    CONTEXT_LENGTH = "context_length"        # the model's context window is full
    TIMEOUT = "timeout"                      # the episode's wall-clock limit
    ENV_ERROR = "env_error"                  # the environment failed; do not train on it


class TruncatedActions(StrEnum):
    """What an action cut off by a token limit does (AgentLoopLimits.truncated_actions)."""

    JUDGED = "judged"            # the environment judges it (the game's on_truncated)
    END_EPISODE = "end_episode"  # the episode ends there, without an environment step


@dataclass(frozen=True, kw_only=True)
class EpisodeLimits:
    """Limits of one episode; 0 (or None) means no limit of that kind."""

    max_turns: int = 0
    max_new_tokens_per_turn: int = 0
    """Also capped by the sampling config's max_new_tokens (the smaller one applies)."""
    max_total_tokens: int = 0
    """Prompt + actions + observations; the model's context window always applies too."""
    timeout_s: float | None = None
    truncated_actions: TruncatedActions = TruncatedActions.JUDGED
    truncation_penalty: float = 0.0
    """Added to the reward of a turn whose action was cut off (<= 0)."""


@dataclass(kw_only=True)
class Turn:
    """One action and the environment's answer, as half-open spans of the token sequence.

    The observation span is empty when no observation tokens followed (the episode ended).
    """

    turn_index: int
    action_start: int
    action_end: int
    action_text: str
    policy_version: int
    observation_start: int = 0
    observation_end: int = 0
    observation_text: str = ""
    reward: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)
    truncated: bool = False
    """A token limit cut the action off (it did not end by itself)."""


@dataclass(kw_only=True)
class Episode:
    """All state of one episode; the agent loop's handlers read and extend it."""

    group_id: str
    episode_index: int
    reset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    env_seed: int = 0
    sampling_seed: int = 0
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    prompt_length: int = 0
    prompt_text: str = ""
    turns: list[Turn] = field(default_factory=list)
    stop_reason: StopReason | None = None
    env_error: str = ""
    env_traceback: str = ""
    policy_version_now: int = 0
    """Policy version of the most recent generation (used when no turn finished)."""
    match_id: str = ""
    """Set for a match episode: the Coordinator match it plays (one seat of it)."""
    seat: str = ""
    agent_id: str = ""
    """The agent this episode plays as (the seat's occupant in a match)."""
    reset_reward: float = 0.0
    """Reward received before the first action (e.g. a match that ended before this seat's
    first turn); part of the total reward, on no token."""
    reset_info: Mapping[str, Any] = field(default_factory=dict)
    """The reset's info (a match that ended before this seat's first turn has its "outcome")."""

    @property
    def trajectory_id(self) -> str:
        return f"{self.group_id}:{self.episode_index}"

    def append_context(self, token_ids: list[int]) -> None:
        """Prompt or observation tokens: not trained on."""
        self.token_ids.extend(token_ids)
        self.loss_mask.extend([0] * len(token_ids))
        self.sampling_logprobs.extend([0.0] * len(token_ids))

    def append_sampled(self, token_ids: list[int], logprobs: list[float]) -> None:
        """Tokens the policy sampled, with their sampling logprobs."""
        if len(token_ids) != len(logprobs):
            raise ValueError("sampled tokens and logprobs differ in length")
        self.token_ids.extend(token_ids)
        self.loss_mask.extend([1] * len(token_ids))
        self.sampling_logprobs.extend(logprobs)

    def finish(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """A finished episode, ready for training (see the module docstring for the lists)."""

    trajectory_id: str
    group_id: str
    episode_index: int
    token_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    sampling_logprobs: tuple[float, ...]
    prompt_length: int
    prompt_text: str
    turns: tuple[Turn, ...]
    total_reward: float
    stop_reason: StopReason
    policy_version: int
    """Lowest policy version among the turns."""
    env_error: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    token_rewards: tuple[float, ...] = ()
    """Each turn's reward on the last token sampled in that turn; 0 elsewhere."""
    agent_id: str = ""
    match_id: str = ""
    seat: str = ""
    outcome: str = ""
    """A match episode's result for its seat ("win", "loss", "draw", "forfeit"), once known."""


def token_rewards(turns: Sequence[Turn], loss_mask: Sequence[int]) -> tuple[float, ...]:
    """Per-token rewards: a turn's reward on its last sampled token (the terminal reward thus
    on the episode's last trainable token); a turn that sampled nothing passes its reward to
    the latest sampled token before it, if any."""
    rewards = [0.0] * len(loss_mask)
    last_sampled = -1
    for turn in turns:
        sampled = [i for i in range(turn.action_start, min(turn.action_end, len(loss_mask))) if loss_mask[i]]
        last_sampled = sampled[-1] if sampled else last_sampled
        if last_sampled >= 0:
            rewards[last_sampled] += turn.reward
    return tuple(rewards)


def to_trajectory(episode: Episode, metrics: Mapping[str, float] | None = None) -> Trajectory:
    """Freeze a terminated episode."""
    versions = [turn.policy_version for turn in episode.turns]
    return Trajectory(
        trajectory_id=episode.trajectory_id, group_id=episode.group_id,
        episode_index=episode.episode_index, token_ids=tuple(episode.token_ids),
        loss_mask=tuple(episode.loss_mask), sampling_logprobs=tuple(episode.sampling_logprobs),
        prompt_length=episode.prompt_length, prompt_text=episode.prompt_text, turns=tuple(episode.turns),
        total_reward=episode.reset_reward + sum(turn.reward for turn in episode.turns),
        stop_reason=episode.stop_reason or StopReason.DONE,
        policy_version=min(versions, default=episode.policy_version_now),
        env_error=episode.env_error, metrics=dict(metrics or {}),
        token_rewards=token_rewards(episode.turns, episode.loss_mask),
        agent_id=episode.agent_id, match_id=episode.match_id, seat=episode.seat,
        outcome=outcome(episode))


def outcome(episode: Episode) -> str:
    """The "outcome" of the last turn's info, else of the reset's ("" when neither has one)."""
    for info in (episode.turns[-1].info if episode.turns else {}, episode.reset_info):
        value = info.get("outcome")
        if isinstance(value, str) and value:
            return value
    return ""
