"""Tenant isolation on every read path of the live stack (auth on, every link mutual TLS).

An admin creates tenants A and B, each with its own key; A runs a job. With B's key, every RPC
of every service (the table below, checked against the service descriptors, so a new RPC
without a row fails) is aimed at A's objects: the Scheduler answers NOT_FOUND for A's job and
tenant (never "forbidden", which would confirm they exist) and PERMISSION_DENIED for admin-only
RPCs; the Trainer, Rollout, EnvHost and Coordinator serve only OpenTinker's own (admin) keys.
The dashboard's JSON API, which forwards the caller's key, behaves the same. Then nothing B can
read (its job lists, its own job and events, its tenant and keys) mentions anything of A's, and
A's job succeeds untouched.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from google.protobuf import message_factory

import opentinker_api
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker.client.tls import open_channel
from opentinker.dashboard.routes import ROUTES
from harness.stack import LocalStack
from tests.chaos._isolation import (A_DISPLAY_NAME, A_TENANT, B_TENANT, SCHEDULER_ROWS, Expect, World, bearer, call,
                                    method_descriptor, named_spec)
from tests.chaos._tls_security_stack import assert_tls_only, tls_admin, tls_stack  # noqa: F401 - fixtures `stack`, `admin` over mutual TLS

pytestmark = pytest.mark.timeout(180)
SCHEDULER = "opentinker.scheduler.v1.SchedulerService"
WORKER_SERVICES = {"opentinker.trainer.v1.TrainerService": "trainer", "opentinker.rollout.v1.RolloutService": "rollout",
                   "opentinker.envhost.v1.EnvHostService": "envhost",
                   "opentinker.coordinator.v1.CoordinatorService": "coordinator"}



WORKER_ROWS: dict[str, tuple[str, ...]] = {
    "opentinker.trainer.v1.TrainerService": ("CreateSession", "GetSession", "ForwardBackward", "OptimStep",
                                             "ComputeLogprobs", "SaveCheckpoint", "LoadCheckpoint",
                                             "ExportWeights", "CloseSession", "StartReplicas"),
    "opentinker.rollout.v1.RolloutService": ("LoadModel", "UnloadModel", "UpdateWeights", "Sample", "RunEpisodes"),
    "opentinker.envhost.v1.EnvHostService": ("ListEnvironments", "OpenSession", "Reset", "Step", "CloseSession",
                                             "Interact"),
    "opentinker.coordinator.v1.CoordinatorService": ("StartRun", "ResumeRun", "StopRun", "GetRun", "WatchRun",
                                                     "OpenMatch", "JoinMatch", "GetMatch", "AwaitTurn",
                                                     "SubmitAction", "LeaveMatch", "ArriveAtBarrier"),
}
"""Every RPC of the services only OpenTinker's own processes call: a tenant key gets PERMISSION_DENIED."""
DASHBOARD_ROWS: dict[str, tuple[str, Callable[[World], str], int]] = {
    "list_jobs": ("GET", lambda w: "/api/jobs", 200),
    "get_job": ("GET", lambda w: f"/api/jobs/{w.a_job.job_id}", 404),
    "job_metrics": ("GET", lambda w: f"/api/jobs/{w.a_job.job_id}/metrics", 404),
    "job_events": ("GET", lambda w: f"/api/jobs/{w.a_job.job_id}/events", 404),
    "job_samples": ("GET", lambda w: f"/api/jobs/{w.a_job.job_id}/samples", 404),
    "job_artifacts": ("GET", lambda w: f"/api/jobs/{w.a_job.job_id}/artifacts", 404),
    "download_artifact": ("GET", lambda w: f"/api/artifacts/download?id={w.a_job.job_id}-final", 404),
    "cancel_job": ("POST", lambda w: f"/api/jobs/{w.a_job.job_id}/cancel", 404),
    "list_workers": ("GET", lambda w: "/api/workers", 200),  # B's own EnvHosts only
    "list_tenants": ("GET", lambda w: "/api/tenants", 403),
}
DASHBOARD_WITHOUT_DATA = {"healthz", "static_file", "page"}


def every_rpc() -> set[str]:
    """`<service full name>/<method>` of every service in the generated API."""
    names = set()
    for info in pkgutil.walk_packages(opentinker_api.__path__, "opentinker_api."):
        if info.name.endswith("_pb2"):
            for service in importlib.import_module(info.name).DESCRIPTOR.services_by_name.values():
                names |= {f"{service.full_name}/{method.name}" for method in service.methods}
    return names


def aimed_at_a(method, world: World):  # noqa: ANN001, ANN201
    """The method's request naming A's job wherever it has a job_id or a lease."""
    request = message_factory.GetMessageClass(method.input_type)()
    fields = request.DESCRIPTOR.fields_by_name
    if "job_id" in fields:
        request.job_id = world.a_job.job_id
    if "lease" in fields:
        request.lease.CopyFrom(world.a_lease())
    return request


@pytest.fixture(scope="module")
def world(stack: LocalStack, admin: SchedulerClient) -> World:
    a_created = admin.create_tenant(A_TENANT)
    b_key = admin.create_tenant(B_TENANT).api_key_secret
    with SchedulerClient(stack.address("scheduler"), api_key=a_created.api_key_secret) as tenant_a:
        a_job = tenant_a.submit_job(named_spec(A_DISPLAY_NAME), request_id="alpha-request")
    for event in admin.watch_job(a_job.job_id):  # until it runs: its leases exist
        if event.WhichOneof("payload") == "state_changed" and event.state_changed.to_state == job_pb2.Job.STATE_RUNNING:
            break
    return World(a_key=a_created.api_key_secret, a_key_id=a_created.api_key.key_id, b_key=b_key,
                 a_job=admin.get_job(a_job.job_id), a_request_id="alpha-request")


def test_the_table_names_every_rpc_of_every_service_and_every_dashboard_route() -> None:
    table = {f"{SCHEDULER}/{name}" for name in SCHEDULER_ROWS}
    table |= {f"{service}/{name}" for service, names in WORKER_ROWS.items() for name in names}
    assert table == every_rpc(), "add a row for each new RPC (and drop rows of removed ones)"
    api_routes = {name for _, _, name in ROUTES} - DASHBOARD_WITHOUT_DATA
    assert set(DASHBOARD_ROWS) == api_routes, "add a row for each new dashboard route"


def test_tenant_b_reaches_nothing_of_tenant_a(stack: LocalStack, admin: SchedulerClient, world: World) -> None:
    assert_tls_only(stack)  # every call below went over the stack's TLS
    readable = [*scheduler_calls_as_b(stack, world), *worker_calls_as_b(stack, world),
                *dashboard_calls_as_b(stack, world)]
    readable += own_objects_of_b(stack, world)
    leaks = [(what, secret) for what, text in readable for secret in world.a_secrets() if secret in text]
    assert leaks == []
    assert {what for what, _ in readable} == {  # what B could read, all of it searched
        f"{SCHEDULER}/SubmitJob", f"{SCHEDULER}/ListJobs", f"{SCHEDULER}/ListWorkers", "dashboard list_jobs",
        "dashboard list_workers", "B's job", "B's events",
        "B's tenant", "B's keys"}
    final = admin.wait(world.a_job.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED and not final.cancel_requested, final.status_message


def scheduler_calls_as_b(stack: LocalStack, world: World) -> list[tuple[str, str]]:
    """Every Scheduler row with B's key; the text of what B could read."""
    readable = []
    with open_channel(stack.address("scheduler")) as channel:  # the stack's TLS
        for name, (expect, make) in SCHEDULER_ROWS.items():
            path = f"{SCHEDULER}/{name}"
            readable += outcome(path, expect, lambda: call(channel, path, make(world), bearer(world.b_key)))
    return readable


def worker_calls_as_b(stack: LocalStack, world: World) -> list[tuple[str, str]]:
    readable = []
    for service, names in WORKER_ROWS.items():
        with open_channel(stack.address(WORKER_SERVICES[service])) as channel:
            for name in names:
                path = f"{service}/{name}"
                request = aimed_at_a(method_descriptor(path), world)
                readable += outcome(path, Expect.DENIED, lambda: call(channel, path, request, bearer(world.b_key)))
    return readable


def outcome(path: str, expect: Expect, run: Callable[[], Any]) -> list[tuple[str, str]]:
    """Run a call expected to end as `expect`; (path, response text) when B may read it."""
    try:
        response = run()
    except grpc.RpcError as error:
        assert expect is not Expect.OWN and error.code() == expect.value, (path, error.code(), error.details())
        return []
    assert expect is Expect.OWN, (path, "answered a tenant key", str(response)[:300])
    return [(path, str(response))]


def dashboard_calls_as_b(stack: LocalStack, world: World) -> list[tuple[str, str]]:
    readable = []
    for name, (method, make_path, status) in DASHBOARD_ROWS.items():
        got, body = http(stack, method, make_path(world), world.b_key)
        assert got == status, (name, got, body[:300])
        if got == 200:
            readable.append((f"dashboard {name}", body))
    return readable


def own_objects_of_b(stack: LocalStack, world: World) -> list[tuple[str, str]]:
    """B's own job (cancelled, so its event stream ends), events, tenant and keys."""
    with SchedulerClient(stack.address("scheduler"), api_key=world.b_key) as tenant_b:
        jobs = list(tenant_b.list_jobs())
        assert jobs and all(job.tenant_id == B_TENANT for job in jobs)
        own = jobs[0]
        tenant_b.cancel_job(own.job_id)
        events = list(tenant_b.watch_job(own.job_id))
        return [("B's job", str(tenant_b.get_job(own.job_id))), ("B's events", "".join(map(str, events))),
                ("B's tenant", str(tenant_b.get_tenant(B_TENANT))),
                ("B's keys", "".join(map(str, tenant_b.list_api_keys(B_TENANT))))]


def http(stack: LocalStack, method: str, path: str, key: str) -> tuple[int, str]:
    data = json.dumps({}).encode() if method == "POST" else None
    request = urllib.request.Request(stack.dashboard_url + path, method=method, data=data, headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
