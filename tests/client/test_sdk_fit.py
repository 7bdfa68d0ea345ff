"""`ServiceClient.fit` (and the asyncio one) submits SFT as well as RL jobs, with a name and the
episode limits, and says how the job ended by name. Against a scripted SchedulerService on a
real gRPC server: what reaches the Scheduler is the spec these tests read."""

from __future__ import annotations

import asyncio

import pytest
from google.protobuf import json_format

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import AsyncServiceClient, ServiceClient, job_spec_from_dict, state_name
from opentinker.client.service_client import fit_job_spec
from tests.client._fake_scheduler import Story, fake_scheduler, final_checkpoint

MODEL = {"builtin": {"name": "tiny-llama", "seed": 1}}
LEARN = {"optimizer": {"learning_rate": 1e-3}}


def story(job_id: str) -> Story:
    return Story(checkpoints=[final_checkpoint(job_id, 3)],
                 metrics=[job_pb2.MetricsReported(step=step, values={"loss": 1.0 / step}) for step in (1, 2, 3)])


def spec_dict(spec: job_pb2.JobSpec) -> dict:
    return json_format.MessageToDict(spec, preserving_proto_field_name=True)


def test_fit_runs_an_sft_job_with_a_name_and_chains_its_checkpoint_into_rl_with_limits() -> None:
    with fake_scheduler(story) as (fake, address), ServiceClient(address, api_key="k") as client:
        warm = client.fit(dataset="datasets/sft.jsonl", model=MODEL, num_steps=3, batch_size=4, name="warm-up",
                          algorithm=LEARN)
        rl = client.fit(env="math", model={"checkpoint": {"checkpoint_id": warm.final_checkpoint_id}}, num_steps=3,
                        name="math-rl", limits={"max_turns": 4, "max_total_tokens": 400}, algorithm=LEARN)
    sft_spec, rl_spec = fake.specs[0], spec_dict(fake.specs[1])
    assert sft_spec == job_spec_from_dict({
        "type": "SFT", "display_name": "warm-up", "dataset": {"path": "datasets/sft.jsonl"},
        "policy": {"model": MODEL, "adaptation": {"full": {}}, "algorithm": LEARN},
        "training": {"total_steps": 3, "batch_size": 4}})
    assert warm.state == "SUCCEEDED" and warm.series("loss") == [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]
    assert warm.final_checkpoint_id == f"{warm.job.job_id}-final"
    assert rl_spec["type"] == "JOB_TYPE_RL" and rl_spec["display_name"] == "math-rl"
    assert rl_spec["policy"]["limits"] == {"max_turns": 4, "max_total_tokens": 400}
    assert rl_spec["policy"]["model"] == {"checkpoint": {"checkpoint_id": warm.final_checkpoint_id}}
    assert rl_spec["environment"] == {"env_name": "math"} and rl_spec["training"]["group_size"] == 8
    assert rl.state == "SUCCEEDED"


def test_the_asyncio_client_fits_sft_too() -> None:
    async def fit(address: str):  # noqa: ANN202
        async with AsyncServiceClient(address, api_key="k") as service:
            return await service.fit(dataset={"path": "chats.jsonl", "messages_field": "conversation"},
                                     model=MODEL, num_steps=3, name="async-sft", algorithm=LEARN)

    with fake_scheduler(story) as (fake, address):
        result = asyncio.run(fit(address))
    (spec,) = fake.specs
    assert spec.type == job_pb2.JOB_TYPE_SFT and spec.display_name == "async-sft"
    assert (spec.dataset.path, spec.dataset.messages_field) == ("chats.jsonl", "conversation")
    assert result.state == "SUCCEEDED"


def test_an_rl_fit_written_before_sft_existed_submits_the_same_spec() -> None:
    assert fit_job_spec(env="math", model=MODEL, num_steps=20, sampling={"max_new_tokens": 8}) == {
        "type": "RL", "environment": {"env_name": "math"},
        "policy": {"model": MODEL, "adaptation": {"full": {}}, "algorithm": {}, "sampling": {"max_new_tokens": 8}},
        "training": {"total_steps": 20, "batch_size": 8, "group_size": 8}}


def test_an_rl_fit_can_overlap_its_rollouts_with_the_update() -> None:
    spec = fit_job_spec(env="math", model=MODEL, num_steps=5, asynchronous={"max_staleness": 1})
    assert spec["async"] == {"max_staleness": 1}
    assert job_spec_from_dict(spec).HasField("async")


@pytest.mark.parametrize(("arguments", "words"), [
    ({}, "an RL job needs env="),
    ({"dataset": "d.jsonl", "asynchronous": {"max_staleness": 1}}, "an SFT job (dataset=...) plays none"),
    ({"env": "math", "dataset": "d.jsonl"}, "give env= (an RL job) or dataset= (an SFT job), not both"),
    ({"dataset": "d.jsonl", "limits": {"max_turns": 2}}, "an SFT job (dataset=...) plays none"),
    ({"job_type": "SFT", "env": "math"}, "an SFT job needs dataset="),
    ({"job_type": "PPO", "env": "math"}, "job_type must be one of RL, SFT"),
])
def test_arguments_that_make_no_single_job_are_refused_before_anything_is_sent(arguments: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        fit_job_spec(model=MODEL, **arguments)


def test_a_fit_result_names_its_state() -> None:
    with fake_scheduler(lambda job_id: Story(final_state=job_pb2.Job.STATE_FAILED, message="boom")) as (_, address):
        with ServiceClient(address, api_key="k") as client:
            result = client.fit(env="math", model=MODEL, num_steps=1)
    assert (result.state, result.succeeded, result.job.status_message) == ("FAILED", False, "boom")
    assert state_name(job_pb2.Job.STATE_RUNNING) == "RUNNING"
