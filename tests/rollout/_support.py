"""Shared helpers of the rollout tests: the builtin tiny model, scripted fakes of the engine,
the renderer and the environment (they implement the real interfaces)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch

from opentinker_runtime.ml.models import LoadedModel, load_model
from opentinker_runtime.ml.sources import ModelSource
from opentinker_rollout.batcher import BatchedGeneration
from opentinker_rollout.engine import FinishReason, Generation, GenerationRequest
from opentinker_rollout.environment import EnvironmentFailure, ResetResult, StepOutcome
from opentinker_rollout.transformers_engine import TransformersEngine

MODEL_NAME = "tiny-llama"
EOS = 259


@cache
def tiny_model(seed: int = 0) -> LoadedModel:
    """The builtin tiny-llama (eval mode, float32); cached, so tests must not change it."""
    return load_model(ModelSource.builtin(MODEL_NAME, seed))


def tiny_engine(seed: int = 0, **kwargs: Any) -> TransformersEngine:
    loaded = tiny_model(seed)
    return TransformersEngine(loaded.model, loaded.tokenizer, **kwargs)


def full_forward_logprobs(model: torch.nn.Module, tokens: Sequence[int]) -> torch.Tensor:
    """log_softmax of a plain forward over the whole sequence: row t predicts token t + 1."""
    with torch.no_grad():
        logits = model(torch.tensor([list(tokens)])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


class ScriptedGenerator:
    """Answers each generate() with the next scripted (tokens, finish) and records requests."""

    def __init__(self, script: Sequence[tuple[list[int], FinishReason]], *, version: int = 0) -> None:
        self.script = list(script)
        self.requests: list[GenerationRequest] = []
        self.version = version

    async def generate(self, request: GenerationRequest) -> BatchedGeneration:
        self.requests.append(request)
        tokens, finish = self.script.pop(0)
        generation = Generation(token_ids=tuple(tokens), logprobs=tuple(-0.5 for _ in tokens),
                                finish_reason=finish)
        return BatchedGeneration(generations=[generation], policy_version=self.version)


class ScriptedRenderer:
    """Prompt = `prompt_ids`; an observation = `observation_ids` (one more token, 0, when the
    action was not closed by EOS); text = the ids joined."""

    def __init__(self, prompt_ids: list[int], observation_ids: list[int]) -> None:
        self.prompt_ids = prompt_ids
        self.observation_ids = observation_ids
        self.messages: list[Sequence[dict[str, str]]] = []

    def prompt(self, messages: Sequence[dict[str, str]]) -> list[int]:
        self.messages.append(messages)
        return list(self.prompt_ids)

    def observation(self, text: str, action_ids: Sequence[int]) -> list[int]:
        closed = bool(action_ids) and action_ids[-1] == EOS
        return list(self.observation_ids) if closed else [0, *self.observation_ids]

    def action_text(self, action_ids: Sequence[int]) -> str:
        return " ".join(str(t) for t in action_ids if t != EOS)

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(str(t) for t in token_ids)


@dataclass(kw_only=True)
class ScriptedEnvironment:
    """Steps return the scripted outcomes in order; `fail_on` raises EnvironmentFailure there."""

    outcomes: list[StepOutcome] = field(default_factory=list)
    fail_on: str = ""
    step_delay_s: float = 0.0
    reset_result: ResetResult = ResetResult(system_prompt="sys", initial_user_message="hi",
                                            observation="obs")
    actions: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    """Per step: whether it came as a cut-off action (`step(..., truncated=True)`)."""
    calls: list[str] = field(default_factory=list)

    async def open(self) -> None:
        self._call("open")

    async def reset(self, kwargs: Mapping[str, Any], seed: int) -> ResetResult:
        self._call("reset")
        return self.reset_result

    async def step(self, action: str, *, truncated: bool = False) -> StepOutcome:
        self._call("step")
        self.actions.append(action)
        self.truncated.append(truncated)
        await asyncio.sleep(self.step_delay_s)
        return self.outcomes.pop(0)

    async def close(self) -> None:
        self.calls.append("close")

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_on == name:
            raise EnvironmentFailure(f"{name} failed on purpose", traceback="Traceback: boom")


def run(coroutine_factory: Callable[[], Any]) -> Any:
    """asyncio.run a coroutine function (tests are sync; pytest-asyncio is not used)."""
    return asyncio.run(coroutine_factory())
