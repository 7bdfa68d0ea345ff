"""gRPC adapters of the driver's ports: Trainer, Rollout, weight sync, Scheduler reporting.

This is the coordinator's service edge: it builds requests from plain values of the job's plan
(`TrainerSession`, `RolloutPolicy`: never the spec itself; `plan_messages` converts them) and
converts responses into domain objects; the drivers never see protobuf.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc
import structlog
from google.protobuf import json_format, struct_pb2

from opentinker_api.common.v1 import (
    datum_pb2, environment_pb2, progress_pb2, resources_pb2, trajectory_pb2, weights_pb2,
)
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as rollout_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as scheduler_grpc
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as trainer_grpc
from opentinker_runtime.core.errors import reason_from_metadata
from opentinker_runtime.jobplan.plan import AdaptationKind, EnvironmentPlan, PolicyPlan
from opentinker_coordinator.adapters.plan_messages import (
    adaptation_message,
    environment_message,
    limits_message,
    loss_message,
    model_message,
    optimizer_message,
    sampling_message,
)
from opentinker_coordinator.adapters.retries import CallGuard
from opentinker_coordinator.adapters.samples_proto import samples_message
from opentinker_coordinator.env_values import numeric_info_values
from opentinker_coordinator.types import CheckpointRef, Datum, EpisodeRequest, SeatRequest, StopReason, Trajectory

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainerSession:
    """One Trainer session of a job (one agent's in a multi-agent job), as plain values of its plan."""

    request_prefix: str
    """`<job_id>`, or `<job_id>/<agent_id>` for an agent: the request ids' prefix."""
    policy: PolicyPlan
    """A learning policy (its loss and optimizer are set)."""
    seed: int
    max_tokens_per_micro_batch: int
    device_ids: tuple[str, ...] = ()
    """The Trainer devices the Scheduler leased the job on rank 0's worker (several = data-parallel)."""
    peers: tuple[trainer_pb.ReplicaPeer, ...] = ()
    """The job's Trainer devices on other workers: further data-parallel ranks, started by rank 0's."""


@dataclass(frozen=True, kw_only=True)
class RolloutPolicy:
    """A job's policy (one agent's) on a Rollout worker, and where its episodes are played."""

    request_prefix: str
    policy: PolicyPlan
    environment: EnvironmentPlan | None = None
    """Single-agent episodes (None in a multi-agent job: its matches are hosted by the Coordinator)."""
    eval_environment: EnvironmentPlan | None = None
    """A multi-agent job's environment each agent is also evaluated in, alone."""
    coordinator_address: str = ""
    """Where the Rollout reaches this Coordinator to play its seats of multi-agent matches."""


def request_prefix(job_id: str, agent_id: str = "") -> str:
    return f"{job_id}/{agent_id}" if agent_id else job_id


def datum_message(datum: Datum) -> datum_pb2.Datum:
    return datum_pb2.Datum(tokens=datum.tokens, loss_mask=datum.loss_mask, advantages=datum.advantages,
                           sampling_logprobs=datum.sampling_logprobs, group_id=datum.group_id)


def is_lora(policy: PolicyPlan) -> bool:
    return policy.adaptation.kind is AdaptationKind.LORA


async def _guarded(guard: CallGuard | None, what: str, attempt):  # noqa: ANN001, ANN202
    """`await attempt()`, through the guard's retries when there is one."""
    return await (guard.call(what, attempt) if guard else attempt())


class RemoteTrainer:
    """TrainerPort over gRPC: one session for the job (for one agent of a multi-agent job).
    Its requests are built from the plan's values once."""

    def __init__(self, channel: grpc.aio.Channel, session: TrainerSession, lease: resources_pb2.LeaseContext,
                 guard: CallGuard | None = None) -> None:
        self.stub = trainer_grpc.TrainerServiceStub(channel)
        self.session, self.lease, self.guard = session, lease, guard
        self.prefix = session.request_prefix
        self.loss = loss_message(session.policy.loss)
        self.session_id = ""
        self.backward_calls = 0

    def create_request(self) -> trainer_pb.CreateSessionRequest:
        policy = self.session.policy
        return trainer_pb.CreateSessionRequest(
            request_id=f"{self.prefix}/session/{self.lease.fencing_token}", lease=self.lease,
            base_model=model_message(policy.model), adaptation=adaptation_message(policy.adaptation),
            optimizer=optimizer_message(policy.optimizer), seed=self.session.seed,
            max_tokens_per_micro_batch=self.session.max_tokens_per_micro_batch,
            device_ids=list(self.session.device_ids), peers=list(self.session.peers))

    async def open(self) -> None:
        request = self.create_request()
        response = await _guarded(self.guard, "CreateSession", lambda: self.stub.CreateSession(request))
        self.session_id = response.session.session_id

    async def forward_backward(self, datums: Sequence[Datum]) -> dict[str, float]:
        self.backward_calls += 1  # a retry reuses the id: the Trainer accumulates the gradients once
        request = trainer_pb.ForwardBackwardRequest(
            session_id=self.session_id, lease=self.lease, datums=[datum_message(d) for d in datums],
            loss=self.loss,
            request_id=f"{self.prefix}/backward/{self.lease.fencing_token}/{self.backward_calls}")
        response = await _guarded(self.guard, "ForwardBackward", lambda: self.stub.ForwardBackward(request))
        return {"loss": response.loss, "loss_tokens": float(response.num_tokens), **dict(response.metrics)}

    async def optim_step(self, step: int) -> dict[str, float]:
        request = trainer_pb.OptimStepRequest(session_id=self.session_id, lease=self.lease,
                                              request_id=f"{self.prefix}/optim/{step}")
        response = await _guarded(self.guard, "OptimStep", lambda: self.stub.OptimStep(request))
        return {"grad_norm": response.grad_norm, "learning_rate": response.learning_rate, **dict(response.metrics)}

    async def save_checkpoint(self, name: str, *, final: bool) -> CheckpointRef:
        if final:
            fmt = (trainer_pb.CHECKPOINT_FORMAT_PEFT_ADAPTER if is_lora(self.session.policy)
                   else trainer_pb.CHECKPOINT_FORMAT_HF_MODEL)
        else:
            fmt = trainer_pb.CHECKPOINT_FORMAT_TRAINING_STATE
        request = trainer_pb.SaveCheckpointRequest(
            session_id=self.session_id, lease=self.lease, format=fmt, name=name,
            request_id=f"{self.prefix}/checkpoint/{name}")
        checkpoint = (await _guarded(self.guard, "SaveCheckpoint", lambda: self.stub.SaveCheckpoint(request))).checkpoint
        return CheckpointRef(checkpoint_id=checkpoint.checkpoint_id, step=checkpoint.step)

    async def load_checkpoint(self, checkpoint_id: str) -> None:
        request = trainer_pb.LoadCheckpointRequest(session_id=self.session_id, lease=self.lease,
                                                   checkpoint_id=checkpoint_id)
        await _guarded(self.guard, "LoadCheckpoint", lambda: self.stub.LoadCheckpoint(request))

    async def close(self) -> None:
        if self.session_id:
            await self.stub.CloseSession(trainer_pb.CloseSessionRequest(session_id=self.session_id, lease=self.lease))


def episode_spec(request: EpisodeRequest) -> rollout_pb.EpisodeSpec:
    kwargs = struct_pb2.Struct()
    kwargs.update(request.reset_kwargs)
    return rollout_pb.EpisodeSpec(group_id=request.group_id, reset_kwargs=kwargs, seed=request.seed)


def _verdict(message: trajectory_pb2.Trajectory) -> bool | None:
    if not message.turns:
        return None
    info = json_format.MessageToDict(message.turns[-1].info)
    return bool(info["correct"]) if "correct" in info else None


UNREACHABLE_ENVIRONMENT = re.compile(r"\bfailed: UNAVAILABLE: ")
"""How the Rollout words an episode whose EnvHost could not be reached ("EnvHost <address> Step
failed: UNAVAILABLE: ..."), as opposed to a game that raised (INTERNAL), ran past its time limit
(DEADLINE_EXCEEDED: the EnvHost answers that for a slow game too) or was given bad input. Only
the error's first line says so: the lines after it are the game's traceback (driver/env_errors.py)."""


def trajectory_from_message(message: trajectory_pb2.Trajectory) -> Trajectory:
    reason = trajectory_pb2.StopReason.Name(message.stop_reason).removeprefix("STOP_REASON_")
    return Trajectory(
        agent_id=message.agent_id, match_id=message.match_id, seat=message.seat, outcome=message.outcome,
        group_id=message.group_id, token_ids=list(message.token_ids), loss_mask=list(message.loss_mask),
        sampling_logprobs=list(message.sampling_logprobs), total_reward=message.total_reward,
        stop_reason=StopReason(reason), policy_version=message.policy_version, correct=_verdict(message),
        prompt_text=message.prompt_text, token_rewards=list(message.token_rewards),
        env_error=message.env_error,
        env_unreachable=bool(UNREACHABLE_ENVIRONMENT.search(message.env_error.partition("\n")[0])),
        truncated_turns=sum(1 for turn in message.turns if turn.truncated),
        env_values=numeric_info_values(json_format.MessageToDict(turn.info) for turn in message.turns),
        transcript=[{"action": t.action_text, "observation": t.observation_text, "reward": t.reward,
                     "policy_version": t.policy_version, "truncated": t.truncated}
                    for t in message.turns])


class RemoteRollout:
    """RolloutPort over gRPC: the job's policy (or one agent's) on one Rollout worker. Its requests'
    parts (model, sampling, limits, environments) are built from the plan's values once."""

    def __init__(self, channel: grpc.aio.Channel, target: RolloutPolicy, lease: resources_pb2.LeaseContext,
                 guard: CallGuard | None = None) -> None:
        self.stub = rollout_grpc.RolloutServiceStub(channel)
        self.target, self.lease, self.guard = target, lease, guard
        policy = target.policy
        self.agent_id = policy.agent_id
        self.sampling = {False: sampling_message(policy.sampling), True: sampling_message(policy.eval_sampling)}
        """By `evaluation`: training samples as the plan says, evaluations greedily."""
        self.limits = limits_message(policy.limits)
        self.environment = environment_message(target.environment) if target.environment else None
        self.eval_environment = environment_message(target.eval_environment) if target.eval_environment else None
        self.policy_id = ""

    async def open(self) -> None:
        policy = self.target.policy
        request = rollout_pb.LoadModelRequest(
            request_id=f"{self.target.request_prefix}/policy/{self.lease.fencing_token}", lease=self.lease,
            model=model_message(policy.model), adaptation=adaptation_message(policy.adaptation))
        self.policy_id = (await _guarded(self.guard, "LoadModel", lambda: self.stub.LoadModel(request))).policy.policy_id

    async def run_episodes(self, requests: Sequence[EpisodeRequest], group_size: int, *, evaluation: bool,
                           environment: environment_pb2.EnvironmentReference | None = None,
                           ) -> AsyncIterator[Trajectory]:
        """Single-agent episodes in the job's environment (or `environment`, e.g. an agent's eval)."""
        request = rollout_pb.RunEpisodesRequest(
            policy_id=self.policy_id, lease=self.lease, environment=environment or self.environment,
            episodes=[episode_spec(r) for r in requests], group_size=group_size,
            sampling=self.sampling[evaluation], limits=self.limits, agent_id=self.agent_id)
        if self.guard is None:
            async for trajectory in self._stream(request):
                yield trajectory
            return
        # with retries the batch is collected whole: a stream cut halfway is run again from the start
        for trajectory in await self.guard.call("RunEpisodes", lambda: self._collect(request)):
            yield trajectory

    async def _collect(self, request: rollout_pb.RunEpisodesRequest) -> list[Trajectory]:
        return [trajectory async for trajectory in self._stream(request)]

    async def play_seats(self, seats: Sequence[SeatRequest], *, evaluation: bool) -> AsyncIterator[Trajectory]:
        """Play this agent's seat in each match (hosted by this Coordinator)."""
        request = rollout_pb.RunEpisodesRequest(
            policy_id=self.policy_id, lease=self.lease, group_size=1,
            episodes=[rollout_pb.EpisodeSpec(group_id=s.group_id, seed=s.seed, match_id=s.match_id, seat=s.seat)
                      for s in seats],
            sampling=self.sampling[evaluation], limits=self.limits,
            coordinator_address=self.target.coordinator_address, agent_id=self.agent_id)
        async for trajectory in self._stream(request):
            yield trajectory

    async def evaluate_alone(self, requests: Sequence[EpisodeRequest]) -> AsyncIterator[Trajectory]:
        """Greedy single-agent episodes in the multi-agent job's eval environment."""
        async for trajectory in self.run_episodes(requests, 1, evaluation=True, environment=self.eval_environment):
            yield trajectory

    async def _stream(self, request: rollout_pb.RunEpisodesRequest) -> AsyncIterator[Trajectory]:
        async for item in self.stub.RunEpisodes(request):
            if item.HasField("trajectory"):
                yield trajectory_from_message(item.trajectory)
            elif item.HasField("error"):
                log.warning("episode_failed", job_id=self.lease.job_id, error=item.error.message)

    async def close(self) -> None:
        if self.policy_id:
            await self.stub.UnloadModel(rollout_pb.UnloadModelRequest(policy_id=self.policy_id, lease=self.lease))


class RemoteWeightSync:
    """Relays Trainer.ExportWeights into Rollout.UpdateWeights (same message types).

    First through shared memory (the Trainer writes one file, only the header travels): when the
    Rollout cannot read that file (it runs on another host, or has no shared directory) it answers
    WEIGHTS_SHARED_FILE_UNAVAILABLE, and this and every later sync of the job stream the chunks;
    a shared file found corrupt is re-sent as a stream once.
    """

    def __init__(self, trainer: RemoteTrainer, rollout: RemoteRollout, *, shared_memory: bool = True) -> None:
        self.trainer, self.rollout = trainer, rollout
        self.shared_memory = shared_memory
        """Try shared memory first (until the Rollout said it cannot read the Trainer's files)."""

    async def _requests(self, transport: int) -> AsyncIterator[rollout_pb.UpdateWeightsRequest]:
        target = rollout_pb.UpdateWeightsTarget(policy_id=self.rollout.policy_id, lease=self.rollout.lease)
        yield rollout_pb.UpdateWeightsRequest(target=target)
        fmt = (weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER if is_lora(self.trainer.session.policy)
               else weights_pb2.WEIGHTS_FORMAT_FULL)
        export = self.trainer.stub.ExportWeights(trainer_pb.ExportWeightsRequest(
            session_id=self.trainer.session_id, format=fmt, transport=transport))
        async for item in export:
            if item.HasField("header"):
                yield rollout_pb.UpdateWeightsRequest(header=item.header)
            else:
                yield rollout_pb.UpdateWeightsRequest(chunk=item.chunk)

    async def _push(self, transport: int) -> int:
        response = await _guarded(self.rollout.guard, "UpdateWeights",
                                  lambda: self.rollout.stub.UpdateWeights(self._requests(transport)))
        return response.policy.policy_version

    async def sync(self) -> int:
        """Push the Trainer's weights; a retry pushes them whole again (the version counts pushes)."""
        if self.shared_memory:
            try:
                return await self._push(weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY)
            except grpc.aio.AioRpcError as error:
                reason = reason_from_metadata(error.trailing_metadata())
                if reason not in SHARED_FILE_FALLBACK_REASONS:
                    raise
                self.shared_memory = reason != "ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE"
                log.info("weights_stream_fallback", job_id=self.trainer.lease.job_id, reason=reason,
                         detail=error.details(), stream_from_now_on=not self.shared_memory)
        return await self._push(weights_pb2.WEIGHTS_TRANSPORT_STREAM)


SHARED_FILE_FALLBACK_REASONS = frozenset({"ERROR_REASON_WEIGHTS_SHARED_FILE_UNAVAILABLE",
                                          "ERROR_REASON_WEIGHTS_CORRUPT"})


class SchedulerReporter:
    """ReporterPort: job events through Scheduler.ReportJobEvents, the outcome through FinishJob.

    Request ids are `<job>/<fencing token>/<n>`, so a retried report appends once.
    """

    def __init__(self, channel: grpc.aio.Channel, lease: resources_pb2.LeaseContext, run_state,
                 guard: CallGuard | None = None) -> None:
        self.stub = scheduler_grpc.SchedulerServiceStub(channel)
        self.lease, self.run_state = lease, run_state
        self.counter = 0
        self.guard = guard

    async def _report(self, event: job_pb2.JobEvent) -> None:
        self.counter += 1
        request = scheduler_pb.ReportJobEventsRequest(
            lease=self.lease, events=[event],
            request_id=f"{self.lease.job_id}/{self.lease.fencing_token}/{self.counter}")
        await _guarded(self.guard, "ReportJobEvents", lambda: self.stub.ReportJobEvents(request))
        await self._tell_outages()

    async def _tell_outages(self) -> None:
        """The Scheduler's outage, reported once it answers again (it could not be before)."""
        while self.guard and self.guard.untold:
            level, message = self.guard.untold.pop(0)
            await self.log(level, message)

    async def metrics(self, step: int, values: dict[str, float], *, agent_id: str = "") -> None:
        self.run_state.record_metrics({f"{agent_id}/{k}" if agent_id else k: v for k, v in values.items()})
        await self._report(job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=step, values=values,
                                                                             agent_id=agent_id)))

    async def progress(self, *, phase: str, step: int, total_steps: int,
                       metrics: dict[str, float] | None = None) -> None:
        self.run_state.record_progress(phase=phase, step=step, total_steps=total_steps)
        # no latest_metrics: the Scheduler keeps a job's latest values from its metrics events, so
        # a progress event (three per RL step) need not repeat them all
        progress = progress_pb2.JobProgress(
            phase=progress_pb2.Phase.Value(f"PHASE_{phase}"), step=step, total_steps=total_steps,
            last_checkpoint_id=self.run_state.last_checkpoint_id)
        await self._report(job_pb2.JobEvent(progress=job_pb2.ProgressUpdated(progress=progress)))

    async def log(self, level: str, message: str, *, source: str = "coordinator") -> None:
        line = job_pb2.LogLine(level=job_pb2.LogLine.Level.Value(f"LEVEL_{level.upper()}"),
                               source=source, message=message)
        await self._report(job_pb2.JobEvent(log=line))

    async def checkpoint(self, ref: CheckpointRef, *, agents: dict[str, str] | None = None,
                         driver_state: dict[str, float] | None = None) -> None:
        self.run_state.last_checkpoint_id = ref.checkpoint_id
        await self._report(job_pb2.JobEvent(checkpoint=job_pb2.CheckpointSaved(
            checkpoint_id=ref.checkpoint_id, step=ref.step, agent_checkpoint_ids=agents or {},
            driver_state=driver_state or {})))

    async def samples(self, step: int, split: str, trajectories: Sequence[Trajectory], *,
                      agent_id: str = "") -> None:
        if trajectories:
            await self._report(job_pb2.JobEvent(samples=samples_message(step, split, trajectories, agent_id)))

    async def finish(self, *, succeeded: bool, message: str) -> None:
        state = job_pb2.Job.STATE_SUCCEEDED if succeeded else job_pb2.Job.STATE_FAILED
        request = scheduler_pb.FinishJobRequest(
            lease=self.lease, final_state=state, message=message,
            request_id=f"{self.lease.job_id}/{self.lease.fencing_token}/finish")
        await self._tell_outages()
        await _guarded(self.guard, "FinishJob", lambda: self.stub.FinishJob(request))


