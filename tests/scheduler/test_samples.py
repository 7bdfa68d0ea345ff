"""SamplesReported events: checked when reported, read back newest first by ListJobSamples, in pages."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from tests.scheduler._harness import lease_of, register_pool, rpc_error, running_job, scheduler_server


def samples_event(step: int, split: str = "train", count: int = 2, text: str = "4") -> job_pb2.JobEvent:
    report = job_pb2.SamplesReported(step=step, split=split)
    for index in range(count):
        sample = report.samples.add(group_id=f"g{index}", prompt=f"{step}+{index}=", reward=float(index),
                                    stop_reason=1)
        sample.turns.add(action=text, observation="right", reward=1.0)
        if index:
            sample.correct = index % 2 == 0
    return job_pb2.JobEvent(samples=report)


def test_samples_are_read_back_newest_first_by_step_and_split_in_pages(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            events = [samples_event(step) for step in range(1, 6)] + [samples_event(5, "eval", 1)]
            metrics = job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=1, values={"loss": 1.0}))
            await h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[metrics, *events]))

            every = (await h.stub.ListJobSamples(pb.ListJobSamplesRequest(job_id=job.job_id))).samples
            assert [(s.step, s.split) for s in every] == [(5, "eval"), *((step, "train") for step in (5, 4, 3, 2, 1))]
            assert every[1] == events[4].samples  # as reported, the unset verdict still unset
            assert not every[1].samples[0].HasField("correct") and every[1].samples[1].correct is False

            pages, token = [], ""
            while True:
                page = await h.stub.ListJobSamples(pb.ListJobSamplesRequest(
                    job_id=job.job_id, split="train", page_size=2, page_token=token))
                pages.append([s.step for s in page.samples])
                token = page.next_page_token
                if not token:
                    break
            assert pages[:3] == [[5, 4], [3, 2], [1]]
            step_3 = (await h.stub.ListJobSamples(pb.ListJobSamplesRequest(job_id=job.job_id, step=3))).samples
            assert [(s.step, s.split) for s in step_3] == [(3, "train")]

    asyncio.run(scenario())


@pytest.mark.parametrize("event, field", [
    (samples_event(1, split="validation"), "events[0].samples.split"),
    (samples_event(1, count=17), "events[0].samples.samples"),
    (samples_event(1, text="x" * 8_001), "events[0].samples.samples[0].turns[0].action"),
])
def test_a_report_of_samples_too_big_or_of_no_known_split_is_refused_naming_the_field(
        redis_url: str, event: job_pb2.JobEvent, field: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            error = await rpc_error(h.stub.ReportJobEvents(pb.ReportJobEventsRequest(lease=lease_of(job), events=[event])))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.details()
            assert not (await h.stub.ListJobSamples(pb.ListJobSamplesRequest(job_id=job.job_id))).samples

    asyncio.run(scenario())


@pytest.mark.parametrize("request_, field", [
    (pb.ListJobSamplesRequest(split="test"), "split"),
    (pb.ListJobSamplesRequest(page_size=-1), "page_size"),
    (pb.ListJobSamplesRequest(step=-2), "step"),
    (pb.ListJobSamplesRequest(page_token="bm90LW91cnM="), "page_token"),
])
def test_bad_sample_queries_name_the_field(redis_url: str, request_: pb.ListJobSamplesRequest, field: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            await register_pool(h)
            job = await running_job(h)
            request_.job_id = job.job_id
            error = await rpc_error(h.stub.ListJobSamples(request_))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and field in error.details()

    asyncio.run(scenario())
