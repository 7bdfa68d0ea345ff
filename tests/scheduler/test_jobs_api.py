"""SubmitJob / GetJob / ListJobs / CancelJob over real gRPC against a real Redis."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from tests.scheduler._harness import reason_of, rl_spec, rpc_error, scheduler_server
from tests.scheduler._spec_edits import two_agents

QUEUED, CANCELLED = job_pb2.Job.STATE_QUEUED, job_pb2.Job.STATE_CANCELLED


def test_submit_stores_a_queued_job_with_a_state_changed_event(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            submitted = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="r1", spec=rl_spec()))
            job = submitted.job
            assert submitted.created and job.job_id.startswith("job-")
            assert (job.state, job.tenant_id, job.last_event_sequence) == (QUEUED, "default", 1)
            assert job.spec == rl_spec() and job.queue_position == 1 and job.create_time.seconds > 0
            fetched = (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
            assert fetched == job
            events = await h.scheduler.jobs.events.after(job.job_id, 0)
            assert [(e.sequence, e.payload.to_state) for e in events] == [(1, "QUEUED")]

    asyncio.run(scenario())


def test_a_multi_agent_spec_is_accepted_with_a_frozen_agent(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            spec = two_agents(rl_spec())
            spec.agents[1].frozen = True
            spec.agents[1].ClearField("adaptation")
            spec.multi_agent.pairing = job_pb2.MultiAgentConfig.PAIRING_ROUND_ROBIN
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="ma", spec=spec))).job
            assert [a.agent_id for a in job.spec.agents] == ["black", "white"]
            assert job.spec.multi_agent.pairing == job_pb2.MultiAgentConfig.PAIRING_ROUND_ROBIN

    asyncio.run(scenario())


def test_submit_is_idempotent_on_request_id(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            first = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="same", spec=rl_spec()))
            again = await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="same", spec=rl_spec()))
            assert first.created and not again.created
            assert again.job.job_id == first.job.job_id
            other = rl_spec(display_name="something else")
            error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="same", spec=other)))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "request_id" in error.details() and first.job.job_id in error.details()
            assert reason_of(error) == "ERROR_REASON_REQUEST_ID_REUSED"
            listed = await h.stub.ListJobs(pb.ListJobsRequest())
            assert [j.job_id for j in listed.jobs] == [first.job.job_id]

    asyncio.run(scenario())


def test_concurrent_retries_of_one_request_create_one_job(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            request = pb.SubmitJobRequest(request_id="race", spec=rl_spec())
            responses = await asyncio.gather(*[h.stub.SubmitJob(request) for _ in range(8)])
            assert len({r.job.job_id for r in responses}) == 1
            assert sum(r.created for r in responses) == 1

    asyncio.run(scenario())


def _bad(mutate) -> job_pb2.JobSpec:  # noqa: ANN001 - a function editing a spec in place
    spec = rl_spec()
    mutate(spec)
    return spec


def _bad_multi(mutate) -> job_pb2.JobSpec:  # noqa: ANN001 - a function editing a spec in place
    spec = two_agents(rl_spec())
    mutate(spec)
    return spec


BAD_SPECS = [
    (_bad_multi(lambda s: s.agents.pop()), "spec.agents"),
    (_bad_multi(lambda s: setattr(s.agents[1], "agent_id", "black")), "spec.agents[1].agent_id"),
    (_bad_multi(lambda s: setattr(s.agents[1], "agent_id", "white agent")), "spec.agents[1].agent_id"),
    (_bad_multi(lambda s: [setattr(a, "frozen", True) for a in s.agents]), "spec.agents"),
    (_bad_multi(lambda s: setattr(s, "type", job_pb2.JOB_TYPE_INFERENCE)), "spec.agents"),
    (_bad_multi(lambda s: s.policy.CopyFrom(s.agents[0])), "spec.agents"),
    (_bad_multi(lambda s: setattr(s.multi_agent, "elo_k", -1)), "spec.multi_agent.elo_k"),
    (_bad(lambda s: setattr(s.multi_agent, "elo_k", 8)), "spec.multi_agent"),
    (_bad(lambda s: setattr(s, "type", job_pb2.JOB_TYPE_UNSPECIFIED)), "spec.type"),
    (_bad(lambda s: s.ClearField("policy")), "spec.policy.model"),
    (_bad(lambda s: s.policy.ClearField("adaptation")), "spec.policy.adaptation"),
    (_bad(lambda s: s.policy.algorithm.optimizer.ClearField("learning_rate")),
     "spec.policy.algorithm.optimizer.learning_rate"),
    (_bad(lambda s: setattr(s.policy.adaptation.lora, "dropout", 1.5)), "spec.policy.adaptation.lora.dropout"),
    (_bad(lambda s: s.environment.ClearField("env_name")), "spec.environment.env_name"),
    (_bad(lambda s: setattr(s.training, "total_steps", 0)), "spec.training.total_steps"),
    (_bad(lambda s: setattr(s.training, "group_size", 0)), "spec.training.group_size"),
    (_bad(lambda s: setattr(s.training, "group_size", 5000)), "spec.training.group_size"),
    (_bad(lambda s: setattr(s.training, "batch_size", -1)), "spec.training.batch_size"),
    (_bad(lambda s: setattr(s.training, "target_loss", 0.5)), "spec.training.target_loss"),
    (_bad(lambda s: setattr(s.training, "target_loss", math.inf)), "spec.training.target_loss"),
    (_bad(lambda s: setattr(s, "priority", 101)), "spec.priority"),
    (_bad(lambda s: setattr(s.policy.algorithm.optimizer, "weight_decay", math.nan)),
     "spec.policy.algorithm.optimizer.weight_decay"),
    (_bad(lambda s: setattr(s.policy.algorithm.loss, "kl_coef", -0.1)), "spec.policy.algorithm.loss.kl_coef"),
    (_bad(lambda s: setattr(s.policy.sampling, "top_p", 1.5)), "spec.policy.sampling.top_p"),
    (_bad(lambda s: s.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=0)),
     "spec.resources[0].device_count"),
    (_bad(lambda s: setattr(s, "type", job_pb2.JOB_TYPE_SFT)), "spec.dataset.path"),
    (_bad(lambda s: setattr(s, "type", 42)), "spec.type"),
    (_bad(lambda s: setattr(s.policy.algorithm.advantage, "estimator", 99)), "spec.policy.algorithm.advantage.estimator"),
    (_bad(lambda s: setattr(s.training, "max_retries", -1)), "spec.training.max_retries"),
    (_bad(lambda s: setattr(s.training, "max_retries", 101)), "spec.training.max_retries"),
    (_bad(lambda s: setattr(s, "display_name", "x" * 201)), "spec.display_name"),
    (_bad(lambda s: s.labels.update({" bad key": "v"})), "spec.labels[' bad key']"),
    (_bad(lambda s: s.labels.update({"team": "v" * 257})), "spec.labels['team']"),
    (_bad(lambda s: setattr(s.inference, "output_path", "/tmp/x.jsonl")), "spec.inference.output_path"),
    (_bad(lambda s: (setattr(s, "type", job_pb2.JOB_TYPE_INFERENCE), s.environment.ClearField("env_name"))),
     "spec.environment.env_name"),
    (_bad(lambda s: setattr(s.training.max_duration, "seconds", -5)), "spec.training.max_duration.seconds"),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS, ids=[field for _, field in BAD_SPECS])
def test_invalid_specs_are_rejected_naming_the_field(redis_url: str, spec: job_pb2.JobSpec,
                                                     field: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(request_id="bad", spec=spec)))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith(f"{field}:"), error.details()
            assert (await h.stub.ListJobs(pb.ListJobsRequest())).jobs == []

    asyncio.run(scenario())


def test_validate_only_stores_nothing(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            response = await h.stub.SubmitJob(pb.SubmitJobRequest(spec=rl_spec(), validate_only=True))
            assert not response.created and response.job.job_id == ""
            assert (await h.stub.ListJobs(pb.ListJobsRequest())).jobs == []

    asyncio.run(scenario())


def test_get_unknown_job_is_not_found(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(h.stub.GetJob(pb.GetJobRequest(job_id="job-nope")))
            assert error.code() == grpc.StatusCode.NOT_FOUND and "job-nope" in error.details()
            error = await rpc_error(h.stub.GetJob(pb.GetJobRequest()))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "job_id" in error.details()

    asyncio.run(scenario())


def test_list_pages_newest_first_and_filters(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            ids = []
            for index in range(7):
                spec = rl_spec() if index % 2 == 0 else rl_spec(type=job_pb2.JOB_TYPE_INFERENCE)
                ids.append((await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=f"r{index}",
                                                                       spec=spec))).job.job_id)
            await h.stub.CancelJob(pb.CancelJobRequest(job_id=ids[4]))
            seen, token = [], ""
            while True:
                page = await h.stub.ListJobs(pb.ListJobsRequest(page_size=3, page_token=token))
                seen.append([j.job_id for j in page.jobs])
                token = page.next_page_token
                if not token:
                    break
            assert seen == [ids[6:3:-1], ids[3:0:-1], ids[0:1]]
            rl_only = await h.stub.ListJobs(pb.ListJobsRequest(type=job_pb2.JOB_TYPE_RL))
            assert [j.job_id for j in rl_only.jobs] == [ids[6], ids[4], ids[2], ids[0]]
            cancelled = await h.stub.ListJobs(pb.ListJobsRequest(states=[CANCELLED]))
            assert [j.job_id for j in cancelled.jobs] == [ids[4]]
            queued_rl = await h.stub.ListJobs(pb.ListJobsRequest(
                states=[QUEUED], type=job_pb2.JOB_TYPE_RL, page_size=2))
            assert [j.job_id for j in queued_rl.jobs] == [ids[6], ids[2]]
            rest = await h.stub.ListJobs(pb.ListJobsRequest(
                states=[QUEUED], type=job_pb2.JOB_TYPE_RL, page_size=2, page_token=queued_rl.next_page_token))
            assert [j.job_id for j in rest.jobs] == [ids[0]] and rest.next_page_token == ""

    asyncio.run(scenario())


@pytest.mark.parametrize(("request_", "field"), [
    (pb.ListJobsRequest(page_size=1001), "page_size"),
    (pb.ListJobsRequest(page_size=-1), "page_size"),
    (pb.ListJobsRequest(page_token="garbage!"), "page_token"),
    (pb.ListJobsRequest(states=[99]), "states[0]"),
])
def test_list_rejects_bad_paging(redis_url: str, request_: pb.ListJobsRequest, field: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            error = await rpc_error(h.stub.ListJobs(request_))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details().startswith(field)

    asyncio.run(scenario())


def test_cancel_a_queued_job_at_once_idempotently(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url) as h:
            job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id="c", spec=rl_spec()))).job
            cancelled = (await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id, reason="oops"))).job
            assert cancelled.state == CANCELLED and cancelled.end_time.seconds > 0
            assert "oops" in cancelled.status_message and cancelled.queue_position == 0
            again = (await h.stub.CancelJob(pb.CancelJobRequest(job_id=job.job_id))).job
            assert again == cancelled
            assert await h.scheduler.jobs.store.queued_ids(10) == []
            error = await rpc_error(h.stub.CancelJob(pb.CancelJobRequest(job_id="job-unknown")))
            assert error.code() == grpc.StatusCode.NOT_FOUND

    asyncio.run(scenario())
