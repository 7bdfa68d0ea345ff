"""A SchedulerService fake on a real gRPC server: each submitted job plays a scripted story (its
events, then its final record), so the CLI and the SDK can be driven to a job's end in
milliseconds. It keeps every submitted spec for the tests to read."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc

State = job_pb2.Job.State


@dataclass(kw_only=True)
class Story:
    """How a submitted job goes: its final state, message and checkpoints (one per step saved)."""

    final_state: int = job_pb2.Job.STATE_SUCCEEDED
    message: str = "finished"
    checkpoints: list[job_pb2.CheckpointSaved] = field(default_factory=list)
    metrics: list[job_pb2.MetricsReported] = field(default_factory=list)


def final_checkpoint(job_id: str, step: int, **agents: str) -> job_pb2.CheckpointSaved:
    """A CheckpointSaved named as the Trainer names a job's last one."""
    return job_pb2.CheckpointSaved(checkpoint_id=f"{job_id}-final", step=step, agent_checkpoint_ids=agents)


class FakeScheduler(pb_grpc.SchedulerServiceServicer):
    def __init__(self, story: Callable[[str], Story]) -> None:
        self.story = story
        self.jobs: dict[str, job_pb2.Job] = {}
        self.events: dict[str, list[job_pb2.JobEvent]] = {}
        self.specs: list[job_pb2.JobSpec] = []
        self.lock = threading.Lock()

    def add_job(self, job: job_pb2.Job) -> None:
        with self.lock:
            self.jobs[job.job_id] = job
            self.events.setdefault(job.job_id, [])

    def SubmitJob(self, request, context):  # noqa: N802
        job_id = f"job-{uuid.uuid4().hex}"
        story = self.story(job_id)
        events = [job_pb2.JobEvent(state_changed=job_pb2.StateChanged(
            from_state=job_pb2.Job.STATE_QUEUED, to_state=job_pb2.Job.STATE_RUNNING))]
        events += [job_pb2.JobEvent(metrics=m) for m in story.metrics]
        events += [job_pb2.JobEvent(checkpoint=c) for c in story.checkpoints]
        events.append(job_pb2.JobEvent(state_changed=job_pb2.StateChanged(
            from_state=job_pb2.Job.STATE_RUNNING, to_state=story.final_state, reason=story.message)))
        for sequence, event in enumerate(events, start=1):
            event.job_id, event.sequence = job_id, sequence
        final = job_pb2.Job(job_id=job_id, tenant_id="system", spec=request.spec, state=story.final_state,
                            status_message=story.message, last_event_sequence=len(events))
        if story.checkpoints:
            final.resume_from.CopyFrom(story.checkpoints[-1])
        with self.lock:
            self.specs.append(request.spec)
            self.jobs[job_id], self.events[job_id] = final, events
        return pb.SubmitJobResponse(job=job_pb2.Job(job_id=job_id, spec=request.spec, state=job_pb2.Job.STATE_QUEUED),
                                    created=True)

    def GetJob(self, request, context):  # noqa: N802
        with self.lock:
            job = self.jobs.get(request.job_id)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.job_id} not found")
        return pb.GetJobResponse(job=job)

    def ListJobs(self, request, context):  # noqa: N802
        with self.lock:
            jobs = list(self.jobs.values())
        return pb.ListJobsResponse(jobs=[j for j in jobs if not request.states or j.state in request.states])

    def WatchJob(self, request, context):  # noqa: N802
        with self.lock:
            events = list(self.events.get(request.job_id, []))
        for event in events:
            if event.sequence > request.after_sequence:
                yield pb.WatchJobResponse(event=event)


@contextmanager
def fake_scheduler(story: Callable[[str], Story] = lambda job_id: Story()) -> Iterator[tuple[FakeScheduler, str]]:
    """(the fake, its address) on 127.0.0.1 and a free port; stopped afterwards."""
    servicer = FakeScheduler(story)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SchedulerServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)
