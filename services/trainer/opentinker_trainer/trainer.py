"""The Trainer's operations, one per TrainerService RPC, in domain terms (no protobuf, no grpc).

Each runs on a session of the `SessionRegistry` (under its lock, in a worker thread, after the
lease checks); `request` makes a call apply once (`sessions.RequestKey`). Which device a
Trainer trains on is decided here too (`build_registry`: "auto" = the first CUDA device when
torch sees one, else the CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_runtime.ml.checkpoints import CheckpointFormat
from opentinker_trainer.batching import Datum
from opentinker_trainer.checkpointing import CheckpointRecord, load_checkpoint, save_checkpoint
from opentinker_trainer.collectives import DEFAULT_COLLECTIVE_TIMEOUT_S
from opentinker_trainer.config import AdamStep, LossConfig, SessionSpec
from opentinker_trainer.cycle_queue import DEFAULT_GATHER_S
from opentinker_trainer.export import WeightsExport, WeightsFormat, export_for_transport
from opentinker_trainer.session import OptimStepResult, SessionView, TrainingSession
from opentinker_trainer.remote_replicas import ReplicaPeer
from opentinker_trainer.replicas import ReplicaInvite
from opentinker_trainer.sessions import DEFAULT_IDLE_TTL_S, RequestKey, SessionRegistry, StartPeer
from opentinker_trainer.shared_exports import SharedExports
from opentinker_trainer.training import ForwardBackwardResult

log = structlog.get_logger(__name__)


class Trainer:
    """Every TrainerService operation over one SessionRegistry; weight exports to shared memory
    go through `shared` (SharedExports(None): always stream)."""

    def __init__(self, registry: SessionRegistry, shared: SharedExports | None = None) -> None:
        self.registry = registry
        self.shared = shared or SharedExports(None)

    def job_of_session(self, session_id: str) -> str:
        """The job a session belongs to ("" for none); SessionNotFoundError for an unknown one."""
        return self.registry.view(session_id).job_id

    async def create_session(self, spec: SessionSpec, *, lease: LeaseContext, device_ids: Sequence[str],
                             request: RequestKey | None, peers: Sequence[ReplicaPeer] = (),
                             job_token: str = "") -> SessionView:
        view = await self.registry.create(spec, lease=lease, device_ids=device_ids, request=request,
                                          peers=peers, job_token=job_token)
        log.info("session_created", session_id=view.session_id, job_id=view.job_id, device_ids=list(view.device_ids),
                 peers=[f"{peer.address}/{','.join(peer.device_ids)}" for peer in peers])
        return view

    async def start_replicas(self, lease: LeaseContext, invite: ReplicaInvite, device_ids: Sequence[str],
                             session_id: str) -> int:
        ranks = await self.registry.start_replicas(lease, invite, device_ids)
        log.info("replicas_accepted", session_id=session_id[:64], job_id=lease.job_id[:128],
                 first_rank=invite.first_rank, world_size=invite.world_size, device_ids=list(device_ids))
        return ranks

    def session(self, session_id: str) -> SessionView:
        return self.registry.view(session_id)

    async def forward_backward(self, session_id: str, lease: LeaseContext, datums: Sequence[Datum],
                               loss: LossConfig, *, request: RequestKey | None) -> ForwardBackwardResult:
        return await self.registry.forward_backward(session_id, lease, datums, loss, request=request)

    async def optim_step(self, session_id: str, lease: LeaseContext, learning_rate: float,
                         adam: AdamStep | None, *, request: RequestKey | None) -> OptimStepResult:
        return await self.registry.run(session_id, lease, lambda session: session.optim_step(learning_rate, adam),
                                       request=request)

    async def compute_logprobs(self, session_id: str, sequences: Sequence[Sequence[int]], *, reference: bool,
                               temperature: float) -> list[list[float]]:
        return await self.registry.run(session_id, None, lambda session: session.compute_logprobs(
            sequences, reference=reference, temperature=temperature))

    async def save_checkpoint(self, session_id: str, lease: LeaseContext, *, format: CheckpointFormat, name: str,
                              data_cursor: bytes, request: RequestKey | None) -> CheckpointRecord:
        record = await self.registry.run(session_id, lease, lambda session: save_checkpoint(
            session, self.registry.checkpoint_root, format=format, name=name, data_cursor=data_cursor),
            request=request)
        log.info("checkpoint_saved", checkpoint_id=record.checkpoint_id, path=str(record.path))
        return record

    async def load_checkpoint(self, session_id: str, lease: LeaseContext, checkpoint_id: str, *,
                              weights_only: bool) -> tuple[bytes, SessionView]:
        """The checkpoint's data cursor and the session after loading it."""
        def load(session: TrainingSession) -> tuple[bytes, SessionView]:
            cursor = load_checkpoint(session, self.registry.checkpoint_root, checkpoint_id, weights_only=weights_only)
            return cursor, session.view()
        return await self.registry.run(session_id, lease, load)

    async def export_weights(self, session_id: str, format: WeightsFormat | None, *, shared_memory: bool,
                             chunk_bytes: int) -> WeightsExport:
        return await self.registry.run(session_id, None, lambda session: export_for_transport(
            session, format, self.shared, shared_memory=shared_memory, chunk_bytes=chunk_bytes))

    async def close_session(self, session_id: str, lease: LeaseContext) -> SessionView:
        view = await self.registry.close(session_id, lease)
        log.info("session_closed", session_id=view.session_id, step=view.step)
        return view


def resolve_device(device: str) -> str:
    """"auto" = "cuda" when torch sees a CUDA device, else "cpu"; anything else as given."""
    if device != "auto":
        return device
    import torch  # the Trainer's processes have it; importing it costs seconds

    return "cuda" if torch.cuda.is_available() else "cpu"


def build_registry(checkpoint_dir: Path, device: str = "auto", device_ids: Sequence[str] = (), *,
                   idle_ttl_s: float = DEFAULT_IDLE_TTL_S, share_lora_base: bool = True,
                   cycle_gather_s: float = DEFAULT_GATHER_S, host: str = "127.0.0.1",
                   start_peer: StartPeer | None = None,
                   collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> SessionRegistry:
    """A registry writing checkpoints under `checkpoint_dir` (created on the first save),
    offering sessions `device_ids` (default: one, "<device>:0"), closing sessions idle for
    `idle_ttl_s` when its `reap_idle` runs; LoRA sessions of one base share it and train in
    cycles (waiting up to `cycle_gather_s` for each other) unless `share_lora_base` is False.
    `host` and `start_peer`: data-parallel sessions across Trainers (SessionRegistry)."""
    device = resolve_device(device)
    return SessionRegistry(checkpoint_root=Path(checkpoint_dir).resolve(), device=device,
                           device_ids=tuple(device_ids) or (f"{device}:0",), idle_ttl_s=idle_ttl_s,
                           share_lora_base=share_lora_base, cycle_gather_s=cycle_gather_s, host=host,
                           start_peer=start_peer, collective_timeout_s=collective_timeout_s)
