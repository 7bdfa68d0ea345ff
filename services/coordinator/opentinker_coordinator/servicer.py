"""The CoordinatorService servicer: converts protobuf <-> run state and the agent protocol, nothing else.

Live: StartRun, StopRun, GetRun, WatchRun and the multi-agent protocol (OpenMatch, JoinMatch,
GetMatch, AwaitTurn, SubmitAction, LeaveMatch, ArriveAtBarrier) over the `AgentProtocol`.
ResumeRun answers UNIMPLEMENTED: a re-queued job resumes through StartRun with its checkpoint.
Errors are DomainErrors mapped by the service edge (`opentinker_runtime.edge`): protocol errors
carry their ErrorReason name in the `opentinker-reason` trailing metadata (a game's traceback in
`opentinker-traceback-bin`). Calls of a job's match or barrier carry the job's token (the
`job_token` declarations).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
from google.protobuf import timestamp_pb2

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker_api.coordinator.v1 import coordinator_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.edge.handlers import servicer_base
from opentinker_runtime.edge.job_token import job_token
from opentinker_coordinator.protocol import match_convert
from opentinker_coordinator.protocol.agent_protocol import AgentProtocol
from opentinker_coordinator.runs import RunRegistry, RunState, RunStatus

SERVICE = pb.DESCRIPTOR.services_by_name["CoordinatorService"]
SERVICE_FULL_NAME = SERVICE.full_name

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


class CoordinatorServicer(servicer_base(pb_grpc.CoordinatorServiceServicer, SERVICE)):  # type: ignore[misc]
    def __init__(self, registry: RunRegistry, protocol: AgentProtocol) -> None:
        self.registry = registry
        self.protocol = protocol

    def job_of_owner(self, match_id: str) -> str:
        return self.protocol.job_of_match(match_id)

    async def StartRun(self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext) -> pb.StartRunResponse:
        run = self.registry.start(request.lease.job_id, request.lease.fencing_token)
        return pb.StartRunResponse(run=run_message(run))

    async def StopRun(self, request: pb.StopRunRequest, context: grpc.aio.ServicerContext) -> pb.StopRunResponse:
        return pb.StopRunResponse(run=run_message(self.registry.stop_existing(request.lease.job_id)))

    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.GetRunResponse:
        return pb.GetRunResponse(run=run_message(self.registry.existing(request.job_id)))

    async def WatchRun(self, request: pb.WatchRunRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.WatchRunResponse]:
        async for run in self.registry.existing(request.job_id).updates():
            yield pb.WatchRunResponse(run=run_message(run))

    # -- the multi-agent protocol ---------------------------------------------------------------

    @job_token(job_id="job_id")
    async def OpenMatch(self, request: pb.OpenMatchRequest, context: grpc.aio.ServicerContext) -> pb.OpenMatchResponse:
        match = await self.protocol.open_match_for_agent(
            job_id=request.job_id, environment=match_convert.environment_ref(request.environment),
            seats=list(request.seats), reset_kwargs=match_convert.struct_dict(request.reset_kwargs, "reset_kwargs"),
            seed=request.seed, request_id=request.request_id)
        return pb.OpenMatchResponse(match=match_convert.match_message(match))

    @job_token(owner="match_id")
    async def JoinMatch(self, request: pb.JoinMatchRequest, context: grpc.aio.ServicerContext) -> pb.JoinMatchResponse:
        match = self.protocol.join(request.match_id, request.agent_id, request.seat)
        return pb.JoinMatchResponse(match=match_convert.match_message(match), system_prompt=match.system_prompt,
                                    initial_user_message=match.initial_user_message)

    async def GetMatch(self, request: pb.GetMatchRequest, context: grpc.aio.ServicerContext) -> pb.GetMatchResponse:
        return pb.GetMatchResponse(match=match_convert.match_message(self.protocol.get(request.match_id)))

    @job_token(owner="match_id")
    async def AwaitTurn(self, request: pb.AwaitTurnRequest, context: grpc.aio.ServicerContext) -> pb.AwaitTurnResponse:
        return match_convert.turn_response(await self.protocol.await_turn(request.match_id, request.agent_id))

    @job_token(owner="match_id")
    async def SubmitAction(self, request: pb.SubmitActionRequest,
                           context: grpc.aio.ServicerContext) -> pb.SubmitActionResponse:
        result = await self.protocol.submit(request.match_id, request.agent_id, request.turn_index,
                                            request.action, request.request_id)
        return match_convert.action_response(result)

    @job_token(owner="match_id")
    async def LeaveMatch(self, request: pb.LeaveMatchRequest, context: grpc.aio.ServicerContext) -> pb.LeaveMatchResponse:
        match = await self.protocol.leave(request.match_id, request.agent_id)
        return pb.LeaveMatchResponse(match=match_convert.match_message(match))

    @job_token(job_id="job_id")
    async def ArriveAtBarrier(self, request: pb.ArriveAtBarrierRequest,
                              context: grpc.aio.ServicerContext) -> pb.ArriveAtBarrierResponse:
        arrival = await self.protocol.arrive(request.job_id, request.agent_id,
                                             match_convert.barrier_phase(request.phase), request.step,
                                             timeout_s=context.time_remaining())
        return pb.ArriveAtBarrierResponse(agents_arrived=arrival.arrived, agents_expected=arrival.expected)


def coordinator_service_binding(registry: RunRegistry, protocol: AgentProtocol) -> ServiceBinding:
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=CoordinatorServicer(registry, protocol),
                          add_to_server=pb_grpc.add_CoordinatorServiceServicer_to_server)
