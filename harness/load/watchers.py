"""The watchers load: W WatchJob streams on one short real job, plus ones that hang up and
resume (see harness/load)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client.scheduler_requests import submit_request
from harness.load.base import CHANNEL_OPTIONS, S, rpc_text
from harness.load.jobs import Scheduler, tiny_rl_spec
from harness.load.probes import read_metric, wait_for_metric


@dataclass(kw_only=True)
class WatchersReport:
    watchers: int
    job_id: str = ""
    final_state: str = ""
    events: int = 0
    """Events of the job (its last sequence)."""
    identical_watchers: int = 0
    """Watchers that received exactly the complete sequence 1..last."""
    resumed_ok: int = 0
    resume_points: list[int] = field(default_factory=list)
    watch_streams_closed: float = 0
    """WatchJob streams the Scheduler counted as ended during the load (its metrics)."""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def lost_events(self) -> int:
        return (self.watchers - self.identical_watchers) + (len(self.resume_points) - self.resumed_ok)


async def _watch_on_own_channel(address: str, api_key: str, job_id: str) -> list[job_pb2.JobEvent]:
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        return await Scheduler(channel, api_key).events(job_id)


async def _watch_with_a_gap(address: str, api_key: str, job_id: str, hang_up_after: int) -> tuple[int, list]:
    """Read `hang_up_after` events, hang up, wait until the job has moved on (or ended), resume
    with after_sequence on a new channel: (where it resumed, every event it got)."""
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        scheduler = Scheduler(channel, api_key)
        call = scheduler.stub.WatchJob(pb.WatchJobRequest(job_id=job_id), metadata=scheduler.metadata)
        head = []
        async for response in call:
            head.append(response.event)
            if len(head) == hang_up_after:
                break
        call.cancel()
        resume_at = head[-1].sequence if head else 0
        await _until_job_passes(scheduler, job_id, resume_at + 3)
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        return resume_at, head + await Scheduler(channel, api_key).events(job_id, after=resume_at)


async def _until_job_passes(scheduler: Scheduler, job_id: str, sequence: int, *, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = (await scheduler("GetJob", pb.GetJobRequest(job_id=job_id))).job
        if job.last_event_sequence >= sequence or job.state in (S.STATE_SUCCEEDED, S.STATE_FAILED, S.STATE_CANCELLED):
            return
        await asyncio.sleep(0.1)


def _fingerprint(events: Sequence[job_pb2.JobEvent]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


async def gather_within(tasks: Sequence[asyncio.Task[Any]], timeout_s: float) -> list[Any]:
    """Each task's result or exception, in order; a task still running after `timeout_s` is
    cancelled and gives a TimeoutError."""
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [TimeoutError(f"still running after {timeout_s:g} s") if task in pending
            else (task.exception() or task.result()) for task in tasks]


async def watchers_load(address: str, api_key: str, *, watchers: int, metrics_url: str, total_steps: int = 2,
                        resume_points: Sequence[int] = (2, 5), timeout_s: float = 300) -> WatchersReport:
    """One tiny RL job watched by `watchers` streams from its submission, plus one watcher per
    entry of `resume_points` that hangs up after that many events and resumes; a watcher not
    done within `timeout_s` is a problem."""
    report = WatchersReport(watchers=watchers, resume_points=list(resume_points))
    started = time.monotonic()
    before = await read_metric(metrics_url, "opentinker_grpc_requests_total", grpc_method="WatchJob")
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        scheduler = Scheduler(channel, api_key)
        job = (await scheduler("SubmitJob", submit_request(tiny_rl_spec(total_steps=total_steps), None))).job
        report.job_id = job.job_id
        full = [asyncio.create_task(_watch_on_own_channel(address, api_key, job.job_id)) for _ in range(watchers)]
        gapped = [asyncio.create_task(_watch_with_a_gap(address, api_key, job.job_id, n)) for n in resume_points]
        results = await gather_within(full, timeout_s)
        resumed = await gather_within(gapped, timeout_s)
        final = (await scheduler("GetJob", pb.GetJobRequest(job_id=job.job_id))).job
    report.final_state = S.State.Name(final.state)
    report.events = final.last_event_sequence
    reference = _check_watchers(results, final, report)
    _check_resumed(resumed, reference, report)
    report.seconds = time.monotonic() - started
    opened = watchers + 2 * len(resume_points)  # a resuming watcher opens two streams
    after = await wait_for_metric(metrics_url, "opentinker_grpc_requests_total",
                                  lambda value: value >= before + opened, grpc_method="WatchJob")
    report.watch_streams_closed = after - before
    if report.watch_streams_closed != opened:
        report.problems.append(f"the Scheduler closed {report.watch_streams_closed:g} WatchJob streams, "
                               f"{opened} were opened")
    return report


def _check_watchers(results: Sequence[Any], final: job_pb2.Job, report: WatchersReport) -> list[bytes]:
    """Every watcher's events against 1..last ending in the job's final state; the reference
    sequence (the first complete one)."""
    reference: list[bytes] = []
    if final.state != S.STATE_SUCCEEDED:
        report.problems.append(f"the watched job ended {report.final_state}: {final.status_message}")
    for index, events in enumerate(results):
        if isinstance(events, BaseException):
            report.problems.append(f"watcher {index}: {rpc_text(events)}")
            continue
        sequences = [e.sequence for e in events]
        ends_as_the_job = bool(events) and events[-1].WhichOneof("payload") == "state_changed" \
            and events[-1].state_changed.to_state == final.state
        complete = ends_as_the_job and sequences == list(range(1, final.last_event_sequence + 1))
        reference = reference or (_fingerprint(events) if complete else [])
        if complete and _fingerprint(events) == reference:
            report.identical_watchers += 1
        else:
            report.problems.append(f"watcher {index}: got {len(events)} events (sequences {_ranges(sequences)}), "
                                   f"expected 1..{final.last_event_sequence} like the others")
    return reference


def _check_resumed(resumed: Sequence[Any], reference: list[bytes], report: WatchersReport) -> None:
    for result in resumed:
        if isinstance(result, BaseException):
            report.problems.append(f"resuming watcher: {rpc_text(result)}")
            continue
        resume_at, events = result
        if reference and _fingerprint(events) == reference:
            report.resumed_ok += 1
        else:
            report.problems.append(f"watcher resumed after {resume_at}: sequences "
                                   f"{_ranges([e.sequence for e in events])}, not the full stream")


def _ranges(sequences: Sequence[int]) -> str:
    """[1, 2, 3, 5, 5] -> '1-3,5,5' (gaps and repeats visible)."""
    parts, start = [], None
    for i, value in enumerate(sequences):
        start = value if start is None else start
        if i + 1 == len(sequences) or sequences[i + 1] != value + 1:
            parts.append(str(value) if start == value else f"{start}-{value}")
            start = None
    return ",".join(parts) or "none"
