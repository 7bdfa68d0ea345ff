"""Protobuf <-> domain conversions of the Rollout API (service edge, used by the servicer).

Request messages become validated domain objects (InvalidArgument names the field); domain
results become response messages. Zero values follow the protos (their defaults are
`opentinker_runtime.jobplan.defaults`, a job's plan holds the same): sampling.n 0 = 1,
sampling.max_new_tokens 0 = 256, temperature 0 = greedy, group_size 0 = 1, a zero limit = no
limit of that kind; LoRA rank 0 = 8, alpha 0 = 2 x rank (`jobplan.models`, as the Trainer). Bounds (work queued at once must not exhaust memory):
sampling.n <= 1024, <= 4096 prompts and prompts x n <= 65,536 per Sample; group_size <= 1024
and <= 4096 EpisodeSpecs per RunEpisodes (the Scheduler's own bounds). Struct configs and
kwargs must hold finite numbers (they travel on as JSON).

Match episodes (EpisodeSpec.match_id): a call plays matches or single-agent episodes, never
both; every match spec names its seat, the call names `coordinator_address` and `agent_id`,
group_size is 0 or 1 (a match is played once per seat) and a match appears once (an agent
takes one seat of a match).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format, struct_pb2

from opentinker_api.common.v1 import (
    errors_pb2,
    model_pb2,
    sampling_pb2,
    trajectory_pb2,
    weights_pb2,
)
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb2
from opentinker_runtime.jobplan import defaults, models
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.ml.sources import LoraSpec, ModelInfo, ModelSource
from opentinker_runtime.ml.shared_weights import SharedFile
from opentinker_runtime.edge.convert import lease_from_proto
from opentinker_runtime.ml.weights import ChecksumAlgorithm, TensorSpec, WeightsChecksum
from opentinker_rollout.engine import FinishReason, SamplingConfig
from opentinker_rollout.episode import EpisodeLimits, StopReason, Trajectory, TruncatedActions, Turn
from opentinker_rollout.errors import InvalidArgument, WeightsCorrupt
from opentinker_rollout.episode_runs import CoordinatorMatches, EnvHostGame, EpisodeRun
from opentinker_rollout.policies import LoadRequest, PolicyInfo, WeightsChunk, WeightsFormat, WeightsHeader
from opentinker_rollout.runner import EpisodeError, EpisodeSpec
from opentinker_rollout.sampler import Completion, Prompt, PromptCompletions

MAX_SAMPLES_PER_PROMPT = 1024  # sampling.n, like the Scheduler's group_size bound
MAX_PROMPTS = 4096             # prompts of one Sample call, like the Scheduler's batch_size bound
MAX_SAMPLE_ROWS = 65536        # prompts x n of one Sample call: every row is queued at once
MAX_GROUP_SIZE = 1024          # RunEpisodes.group_size (the Scheduler's bound)
MAX_EPISODE_SPECS = 4096       # RunEpisodes.episodes (the Scheduler's batch_size bound)
MAX_BATCH_SIZE = 4096          # LoadModel.max_batch_size, like OPENTINKER_ROLLOUT_MAX_BATCH_SIZE
INTERNAL = 13  # google.rpc.Code.INTERNAL
PRECISIONS = {model_pb2.PRECISION_UNSPECIFIED: "default", model_pb2.PRECISION_FLOAT32: "float32",
              model_pb2.PRECISION_BFLOAT16: "bfloat16", model_pb2.PRECISION_FLOAT16: "float16"}
DTYPES = {weights_pb2.TENSOR_DTYPE_FLOAT32: "float32", weights_pb2.TENSOR_DTYPE_BFLOAT16: "bfloat16",
          weights_pb2.TENSOR_DTYPE_FLOAT16: "float16"}
CHECKSUM_ALGORITHMS = {weights_pb2.CHECKSUM_ALGORITHM_XXH3_64_CHUNKED: ChecksumAlgorithm.XXH3_64_CHUNKED,
                       weights_pb2.CHECKSUM_ALGORITHM_XXH3_64: ChecksumAlgorithm.XXH3_64}
"""What current senders compute (chunks hash in parallel), and earlier senders' one-pass XXH3-64."""
FORMATS = {weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER: WeightsFormat.LORA_ADAPTER,
           weights_pb2.WEIGHTS_FORMAT_FULL: WeightsFormat.FULL}
FINISH_STOP_REASONS = {FinishReason.STOP: StopReason.DONE,
                       FinishReason.LENGTH: StopReason.MAX_TURN_TOKENS,
                       FinishReason.CONTEXT: StopReason.CONTEXT_LENGTH}


# ---- requests -> domain ----------------------------------------------------------------------

def load_request(request: rollout_pb2.LoadModelRequest) -> LoadRequest:
    if request.engine not in (rollout_pb2.ENGINE_UNSPECIFIED, rollout_pb2.ENGINE_TRANSFORMERS):
        raise InvalidArgument("engine", "only ENGINE_TRANSFORMERS is available on this worker")
    if not 0 <= request.max_batch_size <= MAX_BATCH_SIZE:
        raise InvalidArgument("max_batch_size", f"must be in [0, {MAX_BATCH_SIZE}] (0 = the worker's default)")
    return LoadRequest(request_id=request.request_id, lease=lease_from_proto(request.lease),
                       source=model_source(request.model), lora=lora_spec(request.adaptation),
                       max_batch_size=request.max_batch_size)


def model_source(message: model_pb2.ModelReference) -> ModelSource:
    try:
        return models.model_source(message, "model")
    except ResolveError as error:
        raise InvalidArgument(error.field, error.message) from error


def lora_spec(message: model_pb2.Adaptation) -> LoraSpec | None:
    """The LoRA adapter to add, or None for full weights (defaults shared with the Trainer)."""
    try:
        return models.lora_spec(message)  # rank at most jobplan.bounds.MAX_LORA_RANK
    except ResolveError as error:
        raise InvalidArgument(error.field, error.message) from error


def sampling_config(message: sampling_pb2.SamplingParams) -> SamplingConfig:
    checks = ((message.max_new_tokens < 0, "max_new_tokens", "must be >= 0"),
              (not 0 <= message.temperature < math.inf, "temperature", "must be a finite number >= 0 (0 = greedy)"),
              (not 0 <= message.top_p <= 1, "top_p", "must be in [0, 1]"),
              (message.top_k < 0, "top_k", "must be >= 0"),
              (not 0 <= message.n <= MAX_SAMPLES_PER_PROMPT, "n",
               f"must be in [0, {MAX_SAMPLES_PER_PROMPT}] (0 = 1)"))
    for bad, field, problem in checks:
        if bad:
            raise InvalidArgument(f"sampling.{field}", problem)
    return SamplingConfig(
        max_new_tokens=message.max_new_tokens or defaults.MAX_NEW_TOKENS,
        temperature=message.temperature, top_p=message.top_p, top_k=message.top_k,
        stop_token_ids=tuple(message.stop_token_ids), stop_strings=tuple(s for s in message.stop if s),
        n=message.n or defaults.SAMPLES_PER_PROMPT, seed=message.seed)


TRUNCATED_ACTIONS = {sampling_pb2.TRUNCATED_ACTIONS_UNSPECIFIED: TruncatedActions.JUDGED,
                     sampling_pb2.TRUNCATED_ACTIONS_JUDGED: TruncatedActions.JUDGED,
                     sampling_pb2.TRUNCATED_ACTIONS_END_EPISODE: TruncatedActions.END_EPISODE}


def episode_limits(message: sampling_pb2.AgentLoopLimits) -> EpisodeLimits:
    for field in ("max_turns", "max_new_tokens_per_turn", "max_total_tokens"):
        if getattr(message, field) < 0:
            raise InvalidArgument(f"limits.{field}", "must be >= 0 (0 = no limit)")
    timeout = message.episode_timeout.ToTimedelta().total_seconds()
    if timeout < 0:
        raise InvalidArgument("limits.episode_timeout", "must not be negative")
    if not math.isfinite(message.truncation_penalty) or message.truncation_penalty > 0:
        raise InvalidArgument("limits.truncation_penalty", "must be a finite number <= 0 (0 = none): a cut-off "
                              "reply must never earn more than the game gives it")
    if message.truncated_actions not in TRUNCATED_ACTIONS:
        raise InvalidArgument("limits.truncated_actions", f"unknown value {message.truncated_actions} "
                              "(TRUNCATED_ACTIONS_JUDGED or TRUNCATED_ACTIONS_END_EPISODE)")
    return EpisodeLimits(max_turns=message.max_turns,
                         max_new_tokens_per_turn=message.max_new_tokens_per_turn,
                         max_total_tokens=message.max_total_tokens, timeout_s=timeout or None,
                         truncated_actions=TRUNCATED_ACTIONS[message.truncated_actions],
                         truncation_penalty=message.truncation_penalty)


def episode_specs(request: rollout_pb2.RunEpisodesRequest) -> tuple[EpisodeSpec, ...]:
    if not request.episodes:
        raise InvalidArgument("episodes", "at least one EpisodeSpec is required")
    if not 0 <= request.group_size <= MAX_GROUP_SIZE:
        raise InvalidArgument("group_size", f"must be in [0, {MAX_GROUP_SIZE}] (0 = 1)")
    if len(request.episodes) > MAX_EPISODE_SPECS:
        raise InvalidArgument("episodes", f"at most {MAX_EPISODE_SPECS} EpisodeSpecs per call")
    if plays_matches(request):
        _check_match_request(request)
    from_struct(request.environment.config, "environment.config")  # the EnvHost gets it as JSON
    return tuple(EpisodeSpec(group_id=spec.group_id, seed=spec.seed, match_id=spec.match_id, seat=spec.seat,
                             reset_kwargs=from_struct(spec.reset_kwargs, f"episodes[{i}].reset_kwargs"))
                 for i, spec in enumerate(request.episodes))


def episode_run(request: rollout_pb2.RunEpisodesRequest) -> EpisodeRun:
    specs = episode_specs(request)
    return EpisodeRun(policy_id=request.policy_id, lease=lease_from_proto(request.lease), specs=specs,
                      group_size=request.group_size or 1, sampling=sampling_config(request.sampling),
                      limits=episode_limits(request.limits), agent_id=request.agent_id,
                      environment=episode_environment(request))


def episode_environment(request: rollout_pb2.RunEpisodesRequest) -> EnvHostGame | CoordinatorMatches:
    """Coordinator matches when the episodes name them, else the EnvHost game `environment` names."""
    if plays_matches(request):
        return CoordinatorMatches(address=request.coordinator_address)
    environment = request.environment
    return EnvHostGame(env_name=environment.env_name, address=environment.envhost_address,
                       config=from_struct(environment.config, "environment.config"))


def plays_matches(request: rollout_pb2.RunEpisodesRequest) -> bool:
    """True when the call's episodes are seats of Coordinator matches."""
    return any(spec.match_id or spec.seat for spec in request.episodes)


def _check_match_request(request: rollout_pb2.RunEpisodesRequest) -> None:
    for i, spec in enumerate(request.episodes):
        if spec.seat and not spec.match_id:
            raise InvalidArgument(f"episodes[{i}].match_id", "is required when seat is set (the match "
                                  "whose seat this episode plays)")
    first = next(i for i, spec in enumerate(request.episodes) if spec.match_id)
    seen: dict[str, int] = {}
    for i, spec in enumerate(request.episodes):
        if not spec.match_id:
            raise InvalidArgument(f"episodes[{i}].match_id", f"is required: episodes[{first}] plays a "
                                  "match, and a call plays matches or single-agent episodes, not both")
        if not spec.seat:
            raise InvalidArgument(f"episodes[{i}].seat", "is required for a match episode (the seat "
                                  "this agent takes in the match)")
        if spec.match_id in seen:
            raise InvalidArgument(f"episodes[{i}].match_id", f"match {spec.match_id!r} is already "
                                  f"played by episodes[{seen[spec.match_id]}]; an agent takes one seat "
                                  "of a match")
        seen[spec.match_id] = i
    if not request.coordinator_address:
        raise InvalidArgument("coordinator_address", "is required for match episodes (the Coordinator "
                              "hosting EpisodeSpec.match_id)")
    if not request.agent_id:
        raise InvalidArgument("agent_id", "is required for match episodes (the agent that takes the seats)")
    if request.group_size > 1:
        raise InvalidArgument("group_size", "must be 0 or 1 for match episodes (each match is played "
                              "once per seat)")


async def weights_target(stream: AsyncIterator[rollout_pb2.UpdateWeightsRequest]) -> rollout_pb2.UpdateWeightsTarget:
    """UpdateWeights' first message: the policy (required) and lease the weights are for."""
    target = await _expect(stream, "target", "the first message must be a target")
    if not target.policy_id:
        raise InvalidArgument("target.policy_id", "is required")
    return target


async def weights_header_message(stream: AsyncIterator[rollout_pb2.UpdateWeightsRequest]) -> weights_pb2.WeightsHeader:
    return await _expect(stream, "header", "the second message must be a header")


async def weight_chunks(stream: AsyncIterator[rollout_pb2.UpdateWeightsRequest]) -> AsyncIterator[WeightsChunk]:
    """The rest of UpdateWeights' stream: chunks only."""
    async for message in stream:
        if message.WhichOneof("item") != "chunk":
            raise InvalidArgument("chunk", "after the header, every message must be a chunk")
        yield WeightsChunk(tensor_name=message.chunk.tensor_name, offset=message.chunk.offset,
                           data=message.chunk.data)


async def _expect(stream: AsyncIterator[rollout_pb2.UpdateWeightsRequest], kind: str, problem: str) -> Any:
    message = await anext(stream, None)
    if message is None or message.WhichOneof("item") != kind:
        raise InvalidArgument(kind, problem)
    return getattr(message, kind)


def prompts(request: rollout_pb2.SampleRequest) -> list[Prompt]:
    if len(request.prompts) > MAX_PROMPTS:
        raise InvalidArgument("prompts", f"at most {MAX_PROMPTS} prompts per call")
    if len(request.prompts) * max(request.sampling.n, 1) > MAX_SAMPLE_ROWS:
        raise InvalidArgument("sampling.n", f"prompts x n must be at most {MAX_SAMPLE_ROWS} completions per call")
    converted = []
    for prompt in request.prompts:
        if prompt.WhichOneof("input") == "messages":
            messages = tuple({"role": m.role, "content": m.content} for m in prompt.messages.messages)
            converted.append(Prompt(messages=messages))
        else:
            converted.append(Prompt(token_ids=tuple(prompt.tokens.tokens)))
    return converted


def weights_header(message: weights_pb2.WeightsHeader) -> WeightsHeader:
    fmt = FORMATS.get(message.format)
    if fmt is None:
        raise InvalidArgument("header.format", "must be WEIGHTS_FORMAT_LORA_ADAPTER or WEIGHTS_FORMAT_FULL")
    tensors = _tensor_specs(message)
    total = sum(spec.byte_length for spec in tensors)
    if message.total_bytes and message.total_bytes != total:
        raise WeightsCorrupt(f"header.total_bytes is {message.total_bytes} but the tensors add up to {total}")
    return WeightsHeader(format=fmt, policy_version=message.policy_version, tensors=tensors,
                         total_bytes=total, checksum=_checksum(message),
                         shared_file=_shared_file(message) if message.HasField("shared_file") else None)


def _checksum(message: weights_pb2.WeightsHeader) -> WeightsChecksum:
    """The header's checksum; an older sender's sha256 when it sets no `checksum`."""
    if message.HasField("checksum"):
        algorithm = CHECKSUM_ALGORITHMS.get(message.checksum.algorithm)
        if algorithm is None:
            raise InvalidArgument("header.checksum.algorithm",
                                  "must be CHECKSUM_ALGORITHM_XXH3_64_CHUNKED (or CHECKSUM_ALGORITHM_XXH3_64)")
        return WeightsChecksum(algorithm=algorithm, hex_digest=message.checksum.hex_digest.lower())
    if not message.sha256:
        raise InvalidArgument("header.checksum", "is required (or, from older senders, header.sha256)")
    return WeightsChecksum(algorithm=ChecksumAlgorithm.SHA256, hex_digest=message.sha256.lower())


def _shared_file(message: weights_pb2.WeightsHeader) -> SharedFile:
    shared = message.shared_file
    if not shared.name or not shared.nonce or shared.size_bytes <= 0:
        raise InvalidArgument("header.shared_file", "needs a name, a nonce and size_bytes > 0")
    return SharedFile(name=shared.name, size_bytes=shared.size_bytes, nonce=shared.nonce)


def _tensor_specs(message: weights_pb2.WeightsHeader) -> tuple[TensorSpec, ...]:
    """The header's tensors, remembered by the header's bytes without the fields that change
    from one export to the next (a policy's layout rarely changes; converting a hundred-odd
    specs costs ~0.6 ms, the key ~0.04 ms)."""
    layout = weights_pb2.WeightsHeader()
    layout.CopyFrom(message)
    for name in _EXPORT_FIELDS:
        layout.ClearField(name)
    key = layout.SerializeToString()
    tensors = _TENSOR_SPECS.get(key)
    if tensors is None:
        tensors = tuple(_tensor_spec(spec, f"header.tensors[{i}]") for i, spec in enumerate(message.tensors))
        if len(_TENSOR_SPECS) >= _TENSOR_SPECS_KEPT:
            _TENSOR_SPECS.clear()
        _TENSOR_SPECS[key] = tensors
    return tensors


_EXPORT_FIELDS = ("policy_version", "sha256", "checksum", "shared_file")
"""WeightsHeader fields that differ between two exports of one layout."""
_TENSOR_SPECS: dict[bytes, tuple[TensorSpec, ...]] = {}
_TENSOR_SPECS_KEPT = 32


def _tensor_spec(message: weights_pb2.TensorSpec, where: str) -> TensorSpec:
    if message.dtype not in DTYPES:
        raise InvalidArgument(f"{where}.dtype", "must be FLOAT32, BFLOAT16 or FLOAT16")
    return TensorSpec(name=message.name, dtype=DTYPES[message.dtype], shape=tuple(message.shape),
                      byte_length=message.byte_length)


# ---- domain -> responses ---------------------------------------------------------------------

def policy(info: PolicyInfo) -> rollout_pb2.Policy:
    return rollout_pb2.Policy(policy_id=info.policy_id, job_id=info.job_id,
                              model_info=model_info(info.model_info),
                              policy_version=info.policy_version,
                              engine=rollout_pb2.ENGINE_TRANSFORMERS)


def model_info(info: ModelInfo) -> model_pb2.ModelInfo:
    return model_pb2.ModelInfo(architecture=info.architecture, parameter_count=info.parameter_count,
                               trainable_parameter_count=info.trainable_parameter_count,
                               vocab_size=info.vocab_size, max_context_length=info.max_context_length,
                               stop_token_ids=list(info.stop_token_ids))


def stop_reason(reason: StopReason) -> int:
    return trajectory_pb2.StopReason.Value(f"STOP_REASON_{reason.name}")


def trajectory(result: Trajectory) -> trajectory_pb2.Trajectory:
    return trajectory_pb2.Trajectory(
        trajectory_id=result.trajectory_id, group_id=result.group_id,
        episode_index=result.episode_index, token_ids=list(result.token_ids),
        loss_mask=list(result.loss_mask), sampling_logprobs=list(result.sampling_logprobs),
        prompt_length=result.prompt_length, turns=[turn(t) for t in result.turns],
        total_reward=result.total_reward, stop_reason=stop_reason(result.stop_reason),
        policy_version=result.policy_version, env_error=result.env_error,
        metrics=dict(result.metrics), prompt_text=result.prompt_text,
        token_rewards=list(result.token_rewards), agent_id=result.agent_id,
        match_id=result.match_id, seat=result.seat, outcome=result.outcome)


def turn(value: Turn) -> trajectory_pb2.Turn:
    return trajectory_pb2.Turn(
        turn_index=value.turn_index, action_start=value.action_start, action_end=value.action_end,
        observation_start=value.observation_start, observation_end=value.observation_end,
        action_text=value.action_text, observation_text=value.observation_text,
        reward=value.reward, policy_version=value.policy_version, info=to_struct(value.info),
        truncated=value.truncated)


def episode_error(error: EpisodeError) -> errors_pb2.ErrorDetail:
    return errors_pb2.ErrorDetail(
        code=INTERNAL, traceback=error.traceback,
        message=f"episode {error.group_id}:{error.episode_index} failed: {error.message}")


def run_episodes_item(result: Trajectory | EpisodeError) -> rollout_pb2.RunEpisodesResponse:
    if isinstance(result, EpisodeError):
        return rollout_pb2.RunEpisodesResponse(error=episode_error(result))
    return rollout_pb2.RunEpisodesResponse(trajectory=trajectory(result))


def sample_response(results: list[PromptCompletions]) -> rollout_pb2.SampleResponse:
    return rollout_pb2.SampleResponse(results=[
        rollout_pb2.PromptCompletions(prompt_length=result.prompt_length,
                                      completions=[completion(c) for c in result.completions],
                                      prompt_logprobs=result.prompt_logprobs)
        for result in results])


def completion(value: Completion) -> rollout_pb2.Completion:
    return rollout_pb2.Completion(
        tokens=list(value.token_ids), logprobs=list(value.logprobs), text=value.text,
        stop_reason=stop_reason(FINISH_STOP_REASONS[value.finish_reason]),
        policy_version=value.policy_version)


def to_struct(values: Any) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(dict(values or {}))
    return struct


def from_struct(struct: struct_pb2.Struct, field: str = "struct") -> dict[str, Any]:
    """A Struct (config, kwargs) as a dict; NaN and Infinity have no JSON form: InvalidArgument."""
    try:
        return json_format.MessageToDict(struct)
    except ValueError as error:
        raise InvalidArgument(field, "numbers must be finite (NaN and Infinity have no JSON form): "
                              f"{error}") from error
