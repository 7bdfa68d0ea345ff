"""The CoordinatorService servicer: converts protobuf <-> run state, nothing else.

Live: StartRun, StopRun, GetRun, WatchRun. The multi-agent protocol (matches, turns,
barriers) and ResumeRun answer UNIMPLEMENTED until issues 8 and 4.
"""

from __future__ import annotations

import grpc
from google.protobuf import timestamp_pb2

from opentinker.api.common.v1 import progress_pb2
from opentinker.api.coordinator.v1 import coordinator_service_pb2 as pb
from opentinker.api.coordinator.v1 import coordinator_service_pb2_grpc as pb_grpc
from opentinker.core.server import ServiceBinding
from opentinker.core.unimplemented import unimplemented_base
from opentinker_coordinator.runs import RunRegistry, RunState, RunStatus

SERVICE_FULL_NAME = pb.DESCRIPTOR.services_by_name["CoordinatorService"].full_name

RUN_STATES = {
    RunStatus.STARTING: pb.Run.STATE_STARTING,
    RunStatus.RUNNING: pb.Run.STATE_RUNNING,
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


class CoordinatorServicer(unimplemented_base(pb_grpc.CoordinatorServiceServicer, SERVICE_FULL_NAME)):
    def __init__(self, registry: RunRegistry) -> None:
        self.registry = registry

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

    async def _existing(self, job_id: str, context: grpc.aio.ServicerContext) -> RunState:
        run = self.registry.get(job_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run for job {job_id!r} on this coordinator")
        return run


def coordinator_service_binding(registry: RunRegistry) -> ServiceBinding:
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=CoordinatorServicer(registry),
                          add_to_server=pb_grpc.add_CoordinatorServiceServicer_to_server)
