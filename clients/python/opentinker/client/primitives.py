"""Tinker-style primitive clients for loops you write yourself: train with TrainingClient,
sample with SamplingClient, move weights between them.

    trainer = TrainingClient("127.0.0.1:50052", base_model={"builtin": {"name": "tiny-llama", "seed": 1}},
                             adaptation={"lora": {"rank": 8, "alpha": 16}}, learning_rate=1e-2)
    sampler = trainer.save_weights_and_get_sampling_client("127.0.0.1:50053")
    results = sampler.sample([prompt_tokens], max_new_tokens=8, temperature=1.0, n=16, seed=7)
    result = trainer.forward_backward(datums, loss={"function": "PPO_CLIP", "clip_low": 0.2, "clip_high": 0.2})
    version = trainer.optim_step()
    sampler.load_weights_from(trainer)            # the next samples come from the new policy
    checkpoint = trainer.save_state("final")

Calls run outside any job (no lease); with auth on, the key must be an admin (service) key.
Mutating Trainer calls carry a request_id, which the Trainer uses to apply them once, so they
are retried on UNAVAILABLE like reads; creating a session or a policy and saving a checkpoint
are not retried. Arguments take protobuf messages or dicts in their JSON form (enum short names
accepted, as in job specs).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from opentinker_api.common.v1 import algorithm_pb2, datum_pb2, model_pb2, sampling_pb2, weights_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker.client.credentials import resolve_api_key
from opentinker.client.retry import RetryPolicy, call_with_retry
from opentinker.client.scheduler_requests import bearer_metadata, normalize_address
from opentinker.client.spec import message_from_dict
from opentinker.client.tls import open_channel

CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0), ("grpc.max_receive_message_length", 256 << 20),
                   ("grpc.max_send_message_length", 256 << 20))


@dataclass(frozen=True, kw_only=True)
class ForwardBackwardResult:
    loss: float
    num_tokens: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class OptimStepResult:
    step: int
    policy_version: int
    grad_norm: float
    learning_rate: float


def datum(prompt: Sequence[int], completion: Sequence[int], *, advantage: float,
          sampling_logprobs: Sequence[float] = ()) -> datum_pb2.Datum:
    """Prompt + completion as one training sequence (index t predicts tokens[t]): the
    completion's tokens carry the advantage and their sampling logprobs, the prompt's mask is 0."""
    padding = [0.0] * len(prompt)
    logprobs = list(sampling_logprobs) or [0.0] * len(completion)
    return datum_pb2.Datum(tokens=[*prompt, *completion], loss_mask=padding + [1.0] * len(completion),
                           advantages=padding + [advantage] * len(completion),
                           sampling_logprobs=padding + logprobs)


class _Client:
    """A channel to one service, the caller's key and the retry policy."""

    def __init__(self, address: str, api_key: str | None, timeout: float, retry: RetryPolicy | None) -> None:
        self.address = normalize_address(address)
        self.channel = open_channel(self.address, CHANNEL_OPTIONS)
        self.api_key = resolve_api_key(api_key)
        self.metadata = bearer_metadata(self.api_key)
        self.timeout, self.retry = timeout, retry or RetryPolicy()

    def _call(self, method, request, *, idempotent: bool = True):  # noqa: ANN001, ANN202
        return call_with_retry(lambda: method(request, timeout=self.timeout, metadata=self.metadata),
                               self.retry, idempotent=idempotent)

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()


class TrainingClient(_Client):
    """One Trainer session: a model (LoRA or full) with its optimizer, created on construction."""

    def __init__(self, trainer_address: str, *, base_model: model_pb2.ModelReference | dict,
                 adaptation: model_pb2.Adaptation | dict | None = None, learning_rate: float = 1e-4,
                 optimizer: algorithm_pb2.OptimizerConfig | dict | None = None, seed: int = 0,
                 api_key: str | None = None, timeout: float = 300.0, retry: RetryPolicy | None = None) -> None:
        super().__init__(trainer_address, api_key, timeout, retry)
        self.stub = trainer_grpc.TrainerServiceStub(self.channel)
        self.base_model = message_from_dict(base_model, model_pb2.ModelReference)
        self.adaptation = message_from_dict(adaptation or {"full": {}}, model_pb2.Adaptation)
        optimizer_config = message_from_dict(optimizer or {"learning_rate": learning_rate, "max_grad_norm": 1.0},
                                             algorithm_pb2.OptimizerConfig)
        request = trainer_pb.CreateSessionRequest(request_id=_request_id(), base_model=self.base_model,
                                                  adaptation=self.adaptation, optimizer=optimizer_config, seed=seed)
        self.session = self._call(self.stub.CreateSession, request, idempotent=False).session
        self.session_id = self.session.session_id

    @property
    def is_lora(self) -> bool:
        return self.adaptation.WhichOneof("kind") == "lora"

    def forward_backward(self, datums: Sequence[datum_pb2.Datum],
                         loss: algorithm_pb2.LossConfig | dict | None = None) -> ForwardBackwardResult:
        """Accumulate the gradient of `loss` over `datums` (applied by the next optim_step)."""
        request = trainer_pb.ForwardBackwardRequest(
            session_id=self.session_id, datums=datums, request_id=_request_id(),
            loss=message_from_dict(loss or {}, algorithm_pb2.LossConfig))
        response = self._call(self.stub.ForwardBackward, request)
        return ForwardBackwardResult(loss=response.loss, num_tokens=response.num_tokens,
                                     metrics=dict(response.metrics))

    def optim_step(self, *, learning_rate: float = 0.0) -> OptimStepResult:
        """Apply the accumulated gradient (learning_rate 0 = the session's schedule)."""
        request = trainer_pb.OptimStepRequest(session_id=self.session_id, learning_rate=learning_rate,
                                              request_id=_request_id())
        response = self._call(self.stub.OptimStep, request)
        return OptimStepResult(step=response.step, policy_version=response.policy_version,
                               grad_norm=response.grad_norm, learning_rate=response.learning_rate)

    def compute_logprobs(self, sequences: Sequence[Sequence[int]], *, reference: bool = False,
                         temperature: float = 1.0) -> list[list[float]]:
        """Each sequence's per-token logprobs under the current (or the reference) weights."""
        request = trainer_pb.ComputeLogprobsRequest(
            session_id=self.session_id, reference=reference, temperature=temperature,
            sequences=[datum_pb2.TokenSequence(tokens=list(s)) for s in sequences])
        return [list(item.logprobs) for item in self._call(self.stub.ComputeLogprobs, request).logprobs]

    def save_state(self, name: str = "") -> trainer_pb.Checkpoint:
        """A checkpoint of the weights (an adapter for LoRA) and the optimizer state."""
        fmt = trainer_pb.CHECKPOINT_FORMAT_PEFT_ADAPTER if self.is_lora else trainer_pb.CHECKPOINT_FORMAT_HF_MODEL
        request = trainer_pb.SaveCheckpointRequest(session_id=self.session_id, format=fmt, name=name)
        return self._call(self.stub.SaveCheckpoint, request, idempotent=False).checkpoint

    def load_state(self, checkpoint_id: str) -> trainer_pb.Session:
        request = trainer_pb.LoadCheckpointRequest(session_id=self.session_id, checkpoint_id=checkpoint_id)
        return self._call(self.stub.LoadCheckpoint, request).session

    def export_weights(self) -> Iterator[trainer_pb.ExportWeightsResponse]:
        """The current weights as a header, then chunks (LoRA: the adapter only)."""
        fmt = weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER if self.is_lora else weights_pb2.WEIGHTS_FORMAT_FULL
        request = trainer_pb.ExportWeightsRequest(session_id=self.session_id, format=fmt)
        return self.stub.ExportWeights(request, timeout=self.timeout, metadata=self.metadata)

    def save_weights_and_get_sampling_client(self, rollout_address: str) -> SamplingClient:
        """A SamplingClient on `rollout_address` serving this session's current weights."""
        sampler = SamplingClient(rollout_address, model=self.base_model, adaptation=self.adaptation,
                                 api_key=self.api_key, timeout=self.timeout, retry=self.retry)
        sampler.load_weights_from(self)
        return sampler

    def close(self) -> None:
        try:
            request = trainer_pb.CloseSessionRequest(session_id=self.session_id)
            self._call(self.stub.CloseSession, request, idempotent=False)
        finally:
            super().close()


class SamplingClient(_Client):
    """One Rollout policy: sample completions (token ids with their logprobs)."""

    def __init__(self, rollout_address: str, *, model: model_pb2.ModelReference | dict,
                 adaptation: model_pb2.Adaptation | dict | None = None, api_key: str | None = None,
                 timeout: float = 300.0, retry: RetryPolicy | None = None) -> None:
        super().__init__(rollout_address, api_key, timeout, retry)
        self.stub = rollout_grpc.RolloutServiceStub(self.channel)
        request = rollout_pb.LoadModelRequest(
            request_id=_request_id(), model=message_from_dict(model, model_pb2.ModelReference),
            adaptation=message_from_dict(adaptation or {"full": {}}, model_pb2.Adaptation))
        self.policy = self._call(self.stub.LoadModel, request, idempotent=False).policy
        self.policy_id = self.policy.policy_id

    def sample(self, prompts: Sequence[Sequence[int]], *, sampling: sampling_pb2.SamplingParams | dict | None = None,
               **params: Any) -> list[rollout_pb.PromptCompletions]:
        """`n` completions per prompt; params are SamplingParams fields (max_new_tokens, temperature,
        top_p, top_k, stop, n, seed). A seeded call is reproducible, so it is retried."""
        params_message = message_from_dict(sampling or params, sampling_pb2.SamplingParams)
        request = rollout_pb.SampleRequest(
            policy_id=self.policy_id, sampling=params_message,
            prompts=[rollout_pb.Prompt(tokens=datum_pb2.TokenSequence(tokens=list(p))) for p in prompts])
        return list(self._call(self.stub.Sample, request, idempotent=params_message.seed != 0).results)

    def load_weights_from(self, trainer: TrainingClient) -> int:
        """Stream the trainer's current weights into this policy; its new policy version."""

        def stream() -> Iterator[rollout_pb.UpdateWeightsRequest]:
            yield rollout_pb.UpdateWeightsRequest(target=rollout_pb.UpdateWeightsTarget(policy_id=self.policy_id))
            for item in trainer.export_weights():
                if item.HasField("header"):
                    yield rollout_pb.UpdateWeightsRequest(header=item.header)
                else:
                    yield rollout_pb.UpdateWeightsRequest(chunk=item.chunk)

        response = call_with_retry(lambda: self.stub.UpdateWeights(stream(), timeout=self.timeout,
                                                                   metadata=self.metadata),
                                   self.retry, idempotent=False)
        self.policy = response.policy
        return response.policy.policy_version

    def close(self) -> None:
        try:
            request = rollout_pb.UnloadModelRequest(policy_id=self.policy_id)
            self._call(self.stub.UnloadModel, request, idempotent=False)
        finally:
            super().close()


def _request_id() -> str:
    return str(uuid.uuid4())
