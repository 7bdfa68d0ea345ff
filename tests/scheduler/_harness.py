"""An in-process scheduler on a real port and a real Redis, with stubs and a movable clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from opentinker_api.common.v1 import algorithm_pb2, environment_pb2, model_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.api_keys import ApiKeyStore
from opentinker_runtime.auth.channels import authenticated_channel
from opentinker_runtime.core.redis_store import connect
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_scheduler.app import Scheduler, build_scheduler
from opentinker_scheduler.clock import Clock
from opentinker_scheduler.config import SchedulerConfig
from opentinker_scheduler.servicer import scheduler_service_binding
from opentinker_scheduler.settings import SchedulerSettings

T = TypeVar("T")
FAST = SchedulerConfig(heartbeat_interval_ms=100, worker_ttl_ms=3_000, allocator_interval_ms=50,
                       watch_block_ms=200, start_at_submit=False)
"""Tests of the allocator's passes queue a job at SubmitJob and start it in the pass they drive
(`allocator.tick()`); tests/scheduler/test_start_at_submit.py (and every stack test, with the
service's settings) cover the start at submit."""
REASON_KEY = "opentinker-reason"


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@dataclass(frozen=True, kw_only=True)
class Harness:
    scheduler: Scheduler
    stub: pb_grpc.SchedulerServiceStub
    address: str


@asynccontextmanager
async def scheduler_server(redis_url: str, *, config: SchedulerConfig = FAST, clock: Clock | None = None,
                           run_allocator: bool = False, port: int = 0,
                           admin_key: str | None = None) -> AsyncIterator[Harness]:
    """Serve the SchedulerService on 127.0.0.1:<port>; the allocator loop only when asked
    (otherwise tests call `scheduler.allocator.tick()` themselves). Auth is off unless an
    `admin_key` is given: then it is installed and the harness stub sends it."""
    client, blocking = connect(redis_url), connect(redis_url, socket_timeout=None)
    scheduler = build_scheduler(client, blocking, config=config, clock=clock, service_key=admin_key or "")
    hooks = [lambda health: scheduler.allocator.run_forever(blocking)] if run_allocator else []
    plan = ServerPlan(services=[scheduler_service_binding(scheduler)], start_hooks=hooks, admin_only=False)
    if admin_key:
        await ApiKeyStore(client=client).ensure(admin_key, description="test admin key")
        settings = SchedulerSettings(port=port, redis_url=redis_url, api_key=admin_key, auth_cache_seconds=0.2)
    else:
        settings = SchedulerSettings(port=port, auth="disabled")
    started = await start_server(settings, plan)
    address = f"127.0.0.1:{started.port}"
    channel = authenticated_channel(address, admin_key or "")
    try:
        yield Harness(scheduler=scheduler, stub=pb_grpc.SchedulerServiceStub(channel), address=address)
    finally:
        await channel.close()
        await stop_server(started, grace_seconds=0.2)
        await client.aclose()
        await blocking.aclose()


def rl_spec(**overrides: Any) -> job_pb2.JobSpec:
    spec = job_pb2.JobSpec(
        type=job_pb2.JOB_TYPE_RL, display_name="math-grpo",
        policy=job_pb2.AgentSpec(
            model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama", seed=1)),
            adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=8, alpha=16)),
            algorithm=algorithm_pb2.Algorithm(optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-3))),
        environment=environment_pb2.EnvironmentReference(env_name="math"),
        training=job_pb2.TrainingConfig(total_steps=10, batch_size=4, group_size=4))
    for name, value in overrides.items():
        setattr(spec, name, value)
    return spec


def register_request(worker_id: str, role: str, devices: int = 1,
                     address: str = "") -> pb.RegisterWorkerRequest:
    return pb.RegisterWorkerRequest(
        worker_id=worker_id, role=resources_pb2.Role.Value(f"ROLE_{role.upper()}"),
        address=address or f"127.0.0.1:{6000 + len(worker_id)}",
        devices=[resources_pb2.Device(device_id=f"cpu:{i}", kind=resources_pb2.DEVICE_KIND_CPU)
                 for i in range(devices)])


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """The AioRpcError a call fails with (AssertionError when it succeeds)."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError("the call succeeded")


def reason_of(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get(REASON_KEY, "")


async def eventually(check: Callable[[], Awaitable[T | None]], *, timeout: float = 5.0,
                     interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def register_pool(h: Harness, *, trainer_devices: int = 1, rollout_devices: int = 1) -> None:
    """One trainer, one rollout and one coordinator worker."""
    await h.stub.RegisterWorker(register_request("trainer-1", "trainer", trainer_devices))
    await h.stub.RegisterWorker(register_request("rollout-1", "rollout", rollout_devices))
    await h.stub.RegisterWorker(register_request("coord-1", "coordinator", 0))


async def running_job(h: Harness, request_id: str = "run", spec: job_pb2.JobSpec | None = None) -> job_pb2.Job:
    """Submit a job and run one allocator pass; the job as it is after the pass."""
    job = (await h.stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id, spec=spec or rl_spec()))).job
    await h.scheduler.allocator.tick()
    return (await h.stub.GetJob(pb.GetJobRequest(job_id=job.job_id))).job


def lease_of(job: job_pb2.Job, role: int = resources_pb2.ROLE_COORDINATOR) -> resources_pb2.LeaseContext:
    return next(a.lease for a in job.assignments if a.role == role)
