"""The API without generated stubs, the way grpcurl and other reflection clients call it
(docs/any_language.md): every message type comes from the Scheduler's server reflection, requests
are built from JSON, calls go over a plain channel with the `authorization` metadata."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.core.embedded_redis import EmbeddedRedis, free_port
from tests._services import SERVICES, ServiceProcess

SCHEDULER = "opentinker.scheduler.v1.SchedulerService"
REFLECTION_DB = 5
"""A Redis database of the session's server that no other test flushes while this module runs."""


class ReflectedApi:
    """Message classes and calls of one service, resolved through server reflection only."""

    def __init__(self, channel: grpc.Channel, service: str) -> None:
        self.channel = channel
        self.database = ProtoReflectionDescriptorDatabase(channel)
        self.pool = descriptor_pool.DescriptorPool(self.database)
        self.service = self.pool.FindServiceByName(service)

    def message(self, full_name: str, json: dict):
        """A message of the reflected type, parsed from proto JSON (what grpcurl -d does)."""
        cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))
        return json_format.ParseDict(json, cls())

    def _callable(self, method_name: str):
        method = self.service.methods_by_name[method_name]
        response = message_factory.GetMessageClass(method.output_type)
        path = f"/{self.service.full_name}/{method.name}"
        make = self.channel.unary_stream if method.server_streaming else self.channel.unary_unary
        return make(path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=response.FromString)

    def call(self, method_name: str, json: dict, *, api_key: str | None, timeout: float = 10):
        method = self.service.methods_by_name[method_name]
        request = self.message(method.input_type.full_name, json)
        metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        return self._callable(method_name)(request, metadata=metadata, timeout=timeout)


@pytest.fixture(scope="module")
def scheduler(redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A Scheduler alone (no workers: jobs stay QUEUED) with API-key auth; (address, admin key)."""
    key = new_api_key()
    redis_url = redis_server.url.rsplit("/", 1)[0] + f"/{REFLECTION_DB}"
    log = Path(tmp_path_factory.mktemp("reflection")) / "scheduler.log"
    process = ServiceProcess(SERVICES[0], port=free_port(), log_path=log, OPENTINKER_AUTH="api_keys",
                             OPENTINKER_API_KEY=key, OPENTINKER_REDIS_URL=redis_url)
    try:
        process.wait_for_health("SERVING", service=SCHEDULER)
        yield process.address, key
    finally:
        process.kill()
        redis.Redis.from_url(redis_url).flushdb()


@pytest.fixture
def api(scheduler: tuple[str, str]) -> Iterator[ReflectedApi]:
    with grpc.insecure_channel(scheduler[0]) as channel:
        yield ReflectedApi(channel, SCHEDULER)


def rl_submit_request(request_id: str) -> dict:
    """The SubmitJob body of docs/any_language.md: full enum names, the env config as a JSON object."""
    return {"request_id": request_id, "spec": {
        "type": "JOB_TYPE_RL", "display_name": "from reflection",
        "policy": {"model": {"builtin": {"name": "tiny-llama", "seed": 1}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": 0.001}},
                   "sampling": {"max_new_tokens": 4, "temperature": 1.0}},
        "environment": {"env_name": "math", "config": {"seed": 1, "eval_size": 4}},
        "training": {"total_steps": 2, "batch_size": 2, "group_size": 2, "eval_episodes": 4}}}


def test_reflection_answers_without_a_key_and_describes_the_scheduler(api: ReflectedApi) -> None:
    assert api.database.get_services() and SCHEDULER in api.database.get_services()
    methods = api.service.methods_by_name
    assert {"SubmitJob", "GetJob", "ListJobs", "CancelJob", "WatchJob"} <= set(methods)
    assert methods["WatchJob"].server_streaming and not methods["SubmitJob"].server_streaming
    spec = api.pool.FindMessageTypeByName("opentinker.scheduler.v1.JobSpec")
    assert spec.fields_by_name["training"].message_type.full_name == "opentinker.scheduler.v1.TrainingConfig"
    states = api.pool.FindEnumTypeByName("opentinker.scheduler.v1.Job.State")
    assert states.values_by_name["STATE_SUCCEEDED"].number == 4


def test_a_call_without_a_key_is_unauthenticated(api: ReflectedApi) -> None:
    with pytest.raises(grpc.RpcError) as error:
        api.call("ListJobs", {}, api_key=None)
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_submit_list_and_watch_with_messages_built_from_reflection(api: ReflectedApi,
                                                                   scheduler: tuple[str, str]) -> None:
    key, request_id = scheduler[1], str(uuid.uuid4())
    submitted = api.call("SubmitJob", rl_submit_request(request_id), api_key=key)
    assert submitted.DESCRIPTOR.file.pool is api.pool  # a reflected type, not a generated stub
    job = json_format.MessageToDict(submitted.job, preserving_proto_field_name=True)
    assert submitted.created and job["state"] == "STATE_QUEUED"
    assert job["spec"]["environment"]["config"] == {"seed": 1, "eval_size": 4}

    retried = api.call("SubmitJob", rl_submit_request(request_id), api_key=key)
    assert not retried.created and retried.job.job_id == submitted.job.job_id

    listed = api.call("ListJobs", {"page_size": 10, "states": ["STATE_QUEUED"]}, api_key=key)
    assert submitted.job.job_id in [j.job_id for j in listed.jobs]

    stream = api.call("WatchJob", {"job_id": submitted.job.job_id}, api_key=key)
    first = json_format.MessageToDict(next(stream).event, preserving_proto_field_name=True)
    stream.cancel()  # a queued job's stream stays open for live events
    assert first["sequence"] == "1" and first["state_changed"]["to_state"] == "STATE_QUEUED"


def test_a_bad_request_is_invalid_argument_naming_the_field(api: ReflectedApi, scheduler: tuple[str, str]) -> None:
    request = rl_submit_request(str(uuid.uuid4()))
    del request["spec"]["environment"]
    with pytest.raises(grpc.RpcError) as error:
        api.call("SubmitJob", request, api_key=scheduler[1])
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details().startswith("spec.environment.env_name:")
    assert ("opentinker-reason", "ERROR_REASON_INVALID_FIELD") in error.value.trailing_metadata()
