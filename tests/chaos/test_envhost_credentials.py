"""A job reaches outside the stack, never with the stack's powers (issue 20, hole 1).

Tenant alpha serves its own games (`opentinker envhost --name ...` under alpha's key, no access
to the stack's Redis) and puts a metadata-logging proxy in front of it, registered as alpha's
EnvHost "spy": exactly what an attacker would do to harvest credentials. alpha's job plays on
"spy" and SUCCEEDS. Everything the spy saw is then checked: no call carried an `authorization`
header, the admin key appears nowhere, each call carried only the job's token and id; and that
token buys nothing: no Scheduler, Trainer, Rollout or Coordinator call, only its own job's
sessions on the stack's EnvHost, and nothing once the job has ended. A raw `envhost_address` is
refused for a tenant key, and tenant beta cannot name alpha's EnvHost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2 as envhost_pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as envhost_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker.client import SchedulerClient
from opentinker.client.errors import InvalidArgument, PermissionDenied
from opentinker_runtime.auth.job_tokens import JOB_ID_METADATA_KEY, JOB_TOKEN_METADATA_KEY
from harness.job_specs import rl_spec
from harness.stack import LocalStack, free_ports
from tests.chaos._isolation import call, method_descriptor
from tests.chaos._metadata_spy import MetadataSpy
from tests.chaos._security_stack import admin, stack  # noqa: F401 - the shared fixtures

pytestmark = pytest.mark.timeout(240)
ALPHA, BETA = "cred-alpha", "cred-beta"
WORKER_SERVICES = {"trainer": "opentinker.trainer.v1.TrainerService/GetSession",
                   "rollout": "opentinker.rollout.v1.RolloutService/Sample",
                   "coordinator": "opentinker.coordinator.v1.CoordinatorService/GetRun",
                   "scheduler": "opentinker.scheduler.v1.SchedulerService/ListTenants"}


@pytest.fixture(scope="module")
def alpha_key(admin: SchedulerClient) -> str:
    return admin.create_tenant(ALPHA).api_key_secret


@pytest.fixture(scope="module")
def alpha_envhost(stack: LocalStack, alpha_key: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """alpha's own EnvHost, served the README's way under alpha's key (it checks job tokens with
    the Scheduler); its port."""
    (port,) = free_ports(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    env["OPENTINKER_API_KEY"] = alpha_key
    log = (tmp_path_factory.mktemp("alpha-envhost") / "envhost.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "opentinker.cli.main", "envhost", "--name", "alpha-games",
                                "--port", str(port), "--scheduler", stack.address("scheduler")],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def registered(client: SchedulerClient, key: str, name: str, timeout: float = 60) -> pb.ListWorkersResponse:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(client.address) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        while time.monotonic() < deadline:
            workers = stub.ListWorkers(pb.ListWorkersRequest(), metadata=bearer(key)).workers
            if any(w.name == name for w in workers):
                return workers
            time.sleep(0.2)
    raise AssertionError(f"{name} never registered")


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def register_spy(address: str, key: str, spy_port: int) -> None:
    with grpc.insecure_channel(address) as channel:
        pb_grpc.SchedulerServiceStub(channel).RegisterWorker(pb.RegisterWorkerRequest(
            worker_id=f"envhost-spy@127.0.0.1:{spy_port}", role=resources_pb2.ROLE_ENVHOST,
            address=f"127.0.0.1:{spy_port}", name="spy"), metadata=bearer(key))


def spec_on(**environment: str) -> dict:
    spec = rl_spec(total_steps=3)
    spec["environment"] = {**spec["environment"], **environment}
    return spec


def first_token(spy: MetadataSpy, timeout: float = 120) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for seen in list(spy.calls):
            metadata = dict(seen.metadata)
            if JOB_TOKEN_METADATA_KEY in metadata:
                return metadata[JOB_TOKEN_METADATA_KEY], metadata.get(JOB_ID_METADATA_KEY, "")
        time.sleep(0.05)
    raise AssertionError("the spy saw no job call")


def job_credential(token: str, job_id: str) -> list[tuple[str, str]]:
    return [(JOB_TOKEN_METADATA_KEY, token), (JOB_ID_METADATA_KEY, job_id)]


def test_a_job_on_a_tenants_envhost_sends_only_its_token_which_buys_nothing_else(
        stack: LocalStack, admin: SchedulerClient, alpha_key: str, alpha_envhost: int) -> None:
    scheduler = stack.address("scheduler")
    (spy_port,) = free_ports(1)
    spy = MetadataSpy(target=f"127.0.0.1:{alpha_envhost}")
    spy.start(spy_port)
    try:
        with SchedulerClient(scheduler, api_key=alpha_key, timeout=30) as alpha:
            registered(alpha, alpha_key, "alpha-games")
            register_spy(scheduler, alpha_key, spy_port)
            with pytest.raises(PermissionDenied, match="admin keys only"):
                alpha.submit_job(spec_on(envhost_address=f"127.0.0.1:{spy_port}"))
            job = alpha.submit_job(spec_on(envhost="spy"))
            token, job_id = first_token(spy)
            assert job_id == job.job_id
            while_running = token_powers(stack, token, job.job_id)
            final = alpha.wait(job.job_id)
        assert final.state == job_pb2.Job.STATE_SUCCEEDED, final.status_message
        assert while_running == {"scheduler": grpc.StatusCode.UNAUTHENTICATED,
                                 "trainer": grpc.StatusCode.UNAUTHENTICATED,
                                 "rollout": grpc.StatusCode.UNAUTHENTICATED,
                                 "coordinator": grpc.StatusCode.UNAUTHENTICATED,
                                 "envhost own job": grpc.StatusCode.OK,
                                 "envhost other job": grpc.StatusCode.PERMISSION_DENIED}
        methods = {seen.method.rsplit("/", 1)[-1] for seen in spy.calls}
        assert {"OpenSession", "Reset", "CloseSession"} <= methods  # (4-token answers end before a Step)
        for seen in spy.calls:
            names = [name for name, _ in seen.metadata]
            assert "authorization" not in names, seen
            assert dict(seen.metadata)[JOB_TOKEN_METADATA_KEY] == token
            assert dict(seen.metadata)[JOB_ID_METADATA_KEY] == job.job_id
        assert not any(stack.api_key in value for value in spy.values())
        for value in set(spy.values()):  # nothing the spy saw is a key of any kind
            assert status_of(scheduler, "opentinker.scheduler.v1.SchedulerService/ListTenants",
                             pb.ListTenantsRequest(), bearer(value)) == grpc.StatusCode.UNAUTHENTICATED
        time.sleep(6)  # past the workers' 5 s cache of positive answers
        assert stack_envhost_open(stack, token, job.job_id, job.job_id) == grpc.StatusCode.UNAUTHENTICATED
    finally:
        spy.stop()


def test_another_tenant_cannot_name_alphas_envhosts(stack: LocalStack, admin: SchedulerClient, alpha_key: str,
                                                    alpha_envhost: int) -> None:
    beta_key = admin.create_tenant(BETA).api_key_secret
    with SchedulerClient(stack.address("scheduler"), api_key=alpha_key) as alpha:
        registered(alpha, alpha_key, "alpha-games")
    with SchedulerClient(stack.address("scheduler"), api_key=beta_key) as beta:
        with pytest.raises(InvalidArgument, match="no EnvHost 'alpha-games' is registered"):
            beta.submit_job(spec_on(envhost="alpha-games"))
        assert [w.worker_id for w in registered_or_empty(stack, beta_key)] == []


def registered_or_empty(stack: LocalStack, key: str) -> list:
    with grpc.insecure_channel(stack.address("scheduler")) as channel:
        return list(pb_grpc.SchedulerServiceStub(channel).ListWorkers(pb.ListWorkersRequest(),
                                                                       metadata=bearer(key)).workers)


def token_powers(stack: LocalStack, token: str, job_id: str) -> dict[str, grpc.StatusCode]:
    """What the job token alone (with its job id) gets from each service while the job runs."""
    credential = job_credential(token, job_id)
    powers = {}
    for service, path in WORKER_SERVICES.items():
        request = method_descriptor_request(path)
        powers[service] = status_of(stack.address(service), path, request, credential)
    powers["envhost own job"] = stack_envhost_open(stack, token, job_id, job_id)
    powers["envhost other job"] = stack_envhost_open(stack, token, job_id, "job-someone-else")
    return powers


def method_descriptor_request(path: str):  # noqa: ANN201
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(method_descriptor(path).input_type)()


def stack_envhost_open(stack: LocalStack, token: str, job_id: str, session_job: str) -> grpc.StatusCode:
    """OpenSession (then CloseSession) on the stack's EnvHost with only the job's token."""
    with grpc.insecure_channel(stack.address("envhost")) as channel:
        stub = envhost_grpc.EnvHostServiceStub(channel)
        try:
            opened = stub.OpenSession(envhost_pb.OpenSessionRequest(env_name="math", job_id=session_job),
                                      metadata=job_credential(token, job_id), timeout=30)
        except grpc.RpcError as error:
            return error.code()
        stub.CloseSession(envhost_pb.CloseSessionRequest(session_id=opened.session_id),
                          metadata=job_credential(token, job_id), timeout=30)
        return grpc.StatusCode.OK


def status_of(address: str, path: str, request, metadata: list[tuple[str, str]]) -> grpc.StatusCode:  # noqa: ANN001
    with grpc.insecure_channel(address) as channel:
        try:
            call(channel, path, request, metadata)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK
