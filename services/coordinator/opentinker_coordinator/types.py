"""Core domain types of the job driver (no grpc, no protobuf)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class StopReason(StrEnum):
    """Why an episode ended (mirrors common.v1.StopReason without its prefix)."""

    DONE = "DONE"
    MAX_TURNS = "MAX_TURNS"
    MAX_TURN_TOKENS = "MAX_TURN_TOKENS"
    MAX_TOTAL_TOKENS = "MAX_TOTAL_TOKENS"
    CONTEXT_LENGTH = "CONTEXT_LENGTH"
    TIMEOUT = "TIMEOUT"
    ENV_ERROR = "ENV_ERROR"
    CANCELLED = "CANCELLED"
    UNSPECIFIED = "UNSPECIFIED"


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """One finished episode as the driver needs it for training and metrics."""

    group_id: str
    token_ids: list[int]
    """Prompt, sampled actions and observations, exactly as the policy saw them."""
    loss_mask: list[int]
    """1 on sampled tokens, 0 on prompt and observation tokens; len == len(token_ids)."""
    sampling_logprobs: list[float]
    """Logprob of each sampled token under the sampling distribution; 0 where mask is 0."""
    total_reward: float
    stop_reason: StopReason
    policy_version: int = 0
    correct: bool | None = None
    """The environment's verdict when it gives one (math: exact match)."""
    prompt_text: str = ""
    transcript: list[dict] = field(default_factory=list)
    """[{"action": ..., "observation": ..., "reward": ...}] per turn, for inference output."""
    token_rewards: list[float] = field(default_factory=list)
    """Each turn's reward on its last sampled token, 0 elsewhere (empty: not reported)."""
    agent_id: str = ""
    match_id: str = ""
    """Multi-agent: the match this trajectory played, its seat there and the seat's result."""
    seat: str = ""
    outcome: str = ""
    env_error: str = ""
    """Why the environment failed (stop reason ENV_ERROR), as the Rollout told it."""
    env_unreachable: bool = False
    """The failure was the environment's host not answering (down, restarting), not the game."""
    truncated_turns: int = 0
    """Turns whose action a token limit cut off (judged by the game, or the episode's end)."""
    env_values: dict[str, list[float]] = field(default_factory=dict)
    """The numeric values of the turns' `info`, by key (bools as 0/1), at most
    `env_values.MAX_KEYS` keys: what the `env/<key>` metrics average."""

    @property
    def failed(self) -> bool:
        """Environment failures are excluded from advantages and training."""
        return self.stop_reason is StopReason.ENV_ERROR

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True, kw_only=True)
class Datum:
    """One training sequence; per-token lists aligned with `tokens` (index 0 never trained)."""

    tokens: list[int]
    loss_mask: list[float]
    advantages: list[float] = field(default_factory=list)
    sampling_logprobs: list[float] = field(default_factory=list)
    group_id: str = ""


@dataclass(frozen=True, kw_only=True)
class EpisodeRequest:
    """One problem to play `group_size` times: passed to the game's reset(**reset_kwargs)."""

    group_id: str
    reset_kwargs: dict
    seed: int


@dataclass(frozen=True, kw_only=True)
class SeatRequest:
    """One seat of a match for an agent to play (multi-agent rollouts)."""

    match_id: str
    seat: str
    group_id: str
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class CheckpointRef:
    checkpoint_id: str
    step: int
