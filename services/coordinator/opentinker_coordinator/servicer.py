"""The CoordinatorService servicer: converts protobuf <-> run state, nothing else.

Live: StartRun, StopRun, GetRun, WatchRun and the multi-agent protocol (OpenMatch, JoinMatch,
GetMatch, AwaitTurn, SubmitAction, LeaveMatch, ArriveAtBarrier) over the `AgentProtocol`.
ResumeRun answers UNIMPLEMENTED: a re-queued job resumes through StartRun with its checkpoint.
Protocol errors carry their ErrorReason name in the `opentinker-reason` trailing metadata.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.errors import REASON_METADATA_KEY, TRACEBACK_METADATA_KEY
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.auth.job_token_guard import require_job_token
from opentinker_runtime.core.unimplemented import unimplemented_base
from opentinker_coordinator.protocol import match_convert
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.protocol.protocol_errors import MatchEnvironmentFailed, ProtocolError
from opentinker_coordinator.runs import RunRegistry, RunState, RunStatus

SERVICE_FULL_NAME = pb.DESCRIPTOR.services_by_name["CoordinatorService"].full_name

RUN_STATES = {
    RunStatus.STARTING: pb.Run.STATE_STARTING,
    RunStatus.RUNNING: pb.Run.STATE_RUNNING,
    RunStatus.PAUSED: pb.Run.STATE_PAUSED,
    RunStatus.STOPPING: pb.Run.STATE_STOPPING,
    RunStatus.FINISHED: pb.Run.STATE_FINISHED,
    RunStatus.FAILED: pb.Run.STATE_FAILED,
}


def run_message(run: RunState) -> pb.Run:
    start = timestamp_pb2.Timestamp()
    start.FromMilliseconds(int(run.start_time * 1000))
    progress = progress_pb2.JobProgress(
        phase=progress_pb2.Phase.Value(f"PHASE_{run.phase}"), step=run.step, total_steps=run.total_steps,
        last_checkpoint_id=run.last_checkpoint_id, latest_metrics=run.latest_metrics)
    return pb.Run(job_id=run.job_id, state=RUN_STATES[run.status], progress=progress,
                  message=run.message, start_time=start)


def answers_protocol_errors(rpc: Callable[..., Any]) -> Callable[..., Any]:
    """Abort with the protocol error's status code, message and reason (and a game traceback)."""
    @functools.wraps(rpc)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await rpc(self, request, context)
        except ProtocolError as error:
            metadata = [(REASON_METADATA_KEY, f"ERROR_REASON_{error.reason}")]
            if isinstance(error, MatchEnvironmentFailed) and error.traceback:
                metadata.append((TRACEBACK_METADATA_KEY, error.traceback.encode()))
            await context.abort(match_convert.status_code(error), str(error), trailing_metadata=tuple(metadata))
    return wrapper


class CoordinatorServicer(unimplemented_base(pb_grpc.CoordinatorServiceServicer, SERVICE_FULL_NAME)):
    def __init__(self, registry: RunRegistry, protocol: AgentProtocol) -> None:
        self.registry = registry
        self.protocol = protocol

    async def StartRun(self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext) -> pb.StartRunResponse:
        if not request.lease.job_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "lease.job_id is required")
        run = self.registry.start(request.lease.job_id, request.lease.fencing_token)
        return pb.StartRunResponse(run=run_message(run))

    async def StopRun(self, request: pb.StopRunRequest, context: grpc.aio.ServicerContext) -> pb.StopRunResponse:
        run = self.registry.stop(request.lease.job_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run for job {request.lease.job_id!r} here")
        return pb.StopRunResponse(run=run_message(run))

    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.GetRunResponse:
        run = await self._existing(request.job_id, context)
        return pb.GetRunResponse(run=run_message(run))

    async def WatchRun(self, request: pb.WatchRunRequest, context: grpc.aio.ServicerContext):
        run = await self._existing(request.job_id, context)
        while True:
            changed = run.changed
            yield pb.WatchRunResponse(run=run_message(run))
            if run.ended:
                return
            await changed.wait()

    # -- the multi-agent protocol ---------------------------------------------------------------

    @answers_protocol_errors
    async def OpenMatch(self, request: pb.OpenMatchRequest, context: grpc.aio.ServicerContext) -> pb.OpenMatchResponse:
        await require_job_token(context, job_id=request.job_id, field="job_id")
        try:
            match = await self.protocol.open_match(
                job_id=request.job_id, environment=match_convert.environment_ref(request.environment),
                seats=list(request.seats),
                reset_kwargs=match_convert.struct_dict(request.reset_kwargs, "reset_kwargs"),
                seed=request.seed, request_id=request.request_id)
        except MatchEnvironmentFailed as error:
            refused = match_convert.open_failure(error, request.environment.envhost_address)
            if refused is None:
                raise
            code, message, reason = refused
            await context.abort(code, message, trailing_metadata=((REASON_METADATA_KEY, reason),))
        return pb.OpenMatchResponse(match=self._match(match))

    @answers_protocol_errors
    async def JoinMatch(self, request: pb.JoinMatchRequest, context: grpc.aio.ServicerContext) -> pb.JoinMatchResponse:
        await self._match_token(request.match_id, context)
        match = self.protocol.join(request.match_id, request.agent_id, request.seat)
        return pb.JoinMatchResponse(match=self._match(match), system_prompt=match.system_prompt,
                                    initial_user_message=match.initial_user_message)

    @answers_protocol_errors
    async def GetMatch(self, request: pb.GetMatchRequest, context: grpc.aio.ServicerContext) -> pb.GetMatchResponse:
        return pb.GetMatchResponse(match=self._match(self.protocol.get(request.match_id)))

    @answers_protocol_errors
    async def AwaitTurn(self, request: pb.AwaitTurnRequest, context: grpc.aio.ServicerContext) -> pb.AwaitTurnResponse:
        await self._match_token(request.match_id, context)
        return match_convert.turn_response(await self.protocol.await_turn(request.match_id, request.agent_id))

    @answers_protocol_errors
    async def SubmitAction(self, request: pb.SubmitActionRequest,
                           context: grpc.aio.ServicerContext) -> pb.SubmitActionResponse:
        await self._match_token(request.match_id, context)
        result = await self.protocol.submit(request.match_id, request.agent_id, request.turn_index,
                                            request.action, request.request_id)
        return match_convert.action_response(result)

    @answers_protocol_errors
    async def LeaveMatch(self, request: pb.LeaveMatchRequest, context: grpc.aio.ServicerContext) -> pb.LeaveMatchResponse:
        await self._match_token(request.match_id, context)
        return pb.LeaveMatchResponse(match=self._match(await self.protocol.leave(request.match_id, request.agent_id)))

    @answers_protocol_errors
    async def ArriveAtBarrier(self, request: pb.ArriveAtBarrierRequest,
                              context: grpc.aio.ServicerContext) -> pb.ArriveAtBarrierResponse:
        await require_job_token(context, job_id=request.job_id, field="job_id")
        remaining = context.time_remaining()
        arrival = await self.protocol.arrive(request.job_id, request.agent_id,
                                             match_convert.barrier_phase(request.phase), request.step,
                                             timeout_s=remaining)
        return pb.ArriveAtBarrierResponse(agents_arrived=arrival.arrived, agents_expected=arrival.expected)

    async def _match_token(self, match_id: str, context: grpc.aio.ServicerContext) -> None:
        """The job token check of a call on a match: its job's (an unknown match is checked by
        the call itself: NOT_FOUND)."""
        match = self.protocol.matches.get(match_id)
        if match is not None:
            await require_job_token(context, job_id=match.job_id, field="match_id")

    def _match(self, match) -> pb.Match:
        return match_convert.match_message(match)

    async def _existing(self, job_id: str, context: grpc.aio.ServicerContext) -> RunState:
        run = self.registry.get(job_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run for job {job_id!r} on this coordinator")
        return run


def coordinator_service_binding(registry: RunRegistry, protocol: AgentProtocol) -> ServiceBinding:
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=CoordinatorServicer(registry, protocol),
                          add_to_server=pb_grpc.add_CoordinatorServiceServicer_to_server)
