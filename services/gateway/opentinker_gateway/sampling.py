"""Sampling sessions: a Rollout policy a SamplingClient samples from, and Tinker's sample wire.

A sampler lives on a live training run of the same tenant (its SESSION job holds the Rollout
lease: a snapshot of the run's weights, or a saved checkpoint of the run), or on its client
session's sampler host (a SESSION job of its own: a base model, or a checkpoint of an ended run). Each run keeps at most MAX_SNAPSHOTS_PER_RUN
unnamed snapshots loaded; sampling from an older one is a 410-like error telling to save again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from opentinker_api.common.v1 import sampling_pb2, trajectory_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_gateway.errors import BadRequest, NotFound
from opentinker_gateway.runs import SamplerHost, TrainingRun
from opentinker_gateway.wire import tinker_public_pb2 as wire

MAX_SNAPSHOTS_PER_RUN = 4
MAX_SAMPLES = 1024
INT32_MAX = 2**31 - 1
UNSEEDED = 0
SEED_FOR_ZERO = 0x5EED
"""Our SamplingParams read seed 0 as unseeded; Tinker's seed 0 is a seed like any other."""


@dataclass(eq=False)
class Sampler:
    sampler_id: str
    tenant_id: str
    run: TrainingRun | SamplerHost
    """Whose Rollout lease the policy lives on."""
    policy_id: str
    base_model: str
    model_path: str | None = None


class Samplers:
    def __init__(self) -> None:
        self._samplers: dict[str, Sampler] = {}

    def add(self, tenant_id: str, run: TrainingRun | SamplerHost, policy_id: str, model_path: str | None,
            base_model: str) -> Sampler:
        sampler = Sampler(sampler_id=f"samp-{uuid.uuid4().hex[:20]}", tenant_id=tenant_id, run=run,
                          policy_id=policy_id, base_model=base_model, model_path=model_path)
        self._samplers[sampler.sampler_id] = sampler
        return sampler

    def get(self, tenant_id: str, sampler_id: str) -> Sampler:
        sampler = self._samplers.get(sampler_id)
        if sampler is None or sampler.tenant_id != tenant_id:
            raise NotFound(f"no sampling session {sampler_id!r} (ended, or not yours)")
        if sampler.run.closed:
            raise NotFound(f"sampling session {sampler_id!r} ended with {sampler.run.model_id}")
        if sampler.policy_id not in sampler.run.sampler_policies.values():
            raise NotFound(f"sampling session {sampler_id!r} was a snapshot that is no longer loaded (a run keeps "
                           f"its {MAX_SNAPSHOTS_PER_RUN} newest); save the weights for a sampler again")
        return sampler

    def drop_run(self, run: TrainingRun | SamplerHost) -> None:
        self._samplers = {k: s for k, s in self._samplers.items() if s.run is not run}


def sampling_params(body: dict, num_samples: int) -> sampling_pb2.SamplingParams:
    if not isinstance(body, dict):
        raise BadRequest("sampling_params must be an object")
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or not 1 <= num_samples <= MAX_SAMPLES:
        raise BadRequest(f"num_samples must be 1..{MAX_SAMPLES}, got {num_samples}")
    params = sampling_pb2.SamplingParams(n=num_samples)
    if (max_tokens := body.get("max_tokens")) is not None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= INT32_MAX:
            raise BadRequest(f"sampling_params.max_tokens must be a positive integer, got {max_tokens!r}")
        params.max_new_tokens = max_tokens
    params.temperature = _number(body, "temperature", 1.0, low=0.0)
    params.top_p = _number(body, "top_p", 1.0, low=0.0, high=1.0)
    top_k = body.get("top_k", -1)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not -1 <= top_k <= INT32_MAX:
        raise BadRequest(f"sampling_params.top_k must be -1 (no limit) or a positive integer, got {top_k!r}")
    params.top_k = max(top_k, 0)
    if (seed := body.get("seed")) is not None:
        if not isinstance(seed, int) or isinstance(seed, bool) or not -2**63 <= seed < 2**63:
            raise BadRequest(f"sampling_params.seed must be a 64-bit integer, got {seed!r}")
        params.seed = seed if seed != 0 else SEED_FOR_ZERO
    _stops(params, body.get("stop"))
    return params


def _number(body: dict, name: str, default: float, *, low: float, high: float | None = None) -> float:
    value = body.get(name, default)
    if not isinstance(value, int | float) or value != value or value < low or (high is not None and value > high):
        bound = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise BadRequest(f"sampling_params.{name} must be a number {bound}, got {value!r}")
    return float(value)


def _stops(params: sampling_pb2.SamplingParams, stop: object) -> None:
    if stop is None:
        return
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list):
        raise BadRequest("sampling_params.stop must be a string, a list of strings or a list of token ids")
    for item in items:
        if isinstance(item, str) and item:
            params.stop.append(item)
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item <= INT32_MAX:
            params.stop_token_ids.append(item)
        else:
            raise BadRequest(f"sampling_params.stop: {item!r} is neither a non-empty string nor a token id")


def sample_response(result: rollout_pb.PromptCompletions, prompt_logprobs: bool) -> bytes:
    message = wire.SampleResponse()
    for completion in result.completions:
        sequence = message.sequences.add()
        sequence.stop_reason = (wire.STOP_REASON_STOP if completion.stop_reason == trajectory_pb2.STOP_REASON_DONE
                                else wire.STOP_REASON_LENGTH)
        sequence.tokens = np.asarray(completion.tokens, dtype=np.int32).tobytes()
        sequence.logprobs = np.asarray(completion.logprobs, dtype=np.float32).tobytes()
    if prompt_logprobs:
        values = np.asarray(result.prompt_logprobs, dtype=np.float32)
        if values.size:
            values[0] = np.nan  # the first prompt token has no context
        message.prompt_logprobs = values.tobytes()
    return message.SerializeToString()
