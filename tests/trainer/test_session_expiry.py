"""No Trainer session outlives its attempt: a new attempt's CreateSession closes the sessions of
the job's older attempts (their fencing tokens are lower), the Scheduler's word that a job stopped
or moved on closes its sessions, and an idle session expires after the TTL. A closed session's
model and optimizer are freed, and calls on it are NOT_FOUND saying why it was closed."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import psutil
import pytest

from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.core.server import ServerPlan, start_server, stop_server
from opentinker_runtime.workers.reaping import attempt_callbacks
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_trainer.main import build_plan
from opentinker_trainer.servicer import trainer_service_binding
from opentinker_trainer.trainer import build_registry
from opentinker_trainer.sessions import SessionRegistry
from opentinker_trainer.settings import TrainerSettings
from tests.trainer._servicer import create_request, lease

Code = grpc.StatusCode


@asynccontextmanager
async def trainer(tmp_path: Path, **settings) -> AsyncIterator[tuple[pb_grpc.TrainerServiceStub, SessionRegistry]]:
    """A Trainer (its registry over a real gRPC server on a free port) and a stub to it."""
    registry = build_registry(tmp_path, "cpu", **settings)
    plan = ServerPlan(services=[trainer_service_binding(registry)], close_hooks=[registry.close_all])
    started = await start_server(TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path), plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
            yield pb_grpc.TrainerServiceStub(channel), registry
    finally:
        await stop_server(started, grace_seconds=1)


async def create(stub: pb_grpc.TrainerServiceStub, *, token: int, job: str = "job-1") -> str:
    request = create_request(job=job, lease=lease(token=token, job=job))
    return (await stub.CreateSession(request)).session.session_id


async def not_found(stub: pb_grpc.TrainerServiceStub, session_id: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetSession(pb.GetSessionRequest(session_id=session_id))
    assert caught.value.code() == Code.NOT_FOUND
    return caught.value.details()


def model_of(registry: SessionRegistry, session_id: str) -> weakref.ref:
    return weakref.ref(registry._entries[session_id].session.model)


def assert_freed(model: weakref.ref) -> None:
    gc.collect()
    assert model() is None, "the closed session's model is still referenced"


def test_a_new_attempt_closes_the_sessions_of_older_attempts_of_its_job(tmp_path) -> None:
    async def scenario() -> None:
        async with trainer(tmp_path) as (stub, registry):
            old = await create(stub, token=1)
            other_job = await create(stub, token=1, job="job-2")
            old_model = model_of(registry, old)
            new = await create(stub, token=2)
            message = await not_found(stub, old)
            assert old in message and "newer attempt" in message and "fencing token 2" in message
            assert_freed(old_model)
            assert (await stub.GetSession(pb.GetSessionRequest(session_id=new))).session.session_id == new
            assert (await stub.GetSession(pb.GetSessionRequest(session_id=other_job))).session.job_id == "job-2"
            assert set(registry._entries) == {new, other_job}
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # the old attempt cannot close it either
                await stub.CloseSession(pb.CloseSessionRequest(session_id=old, lease=lease(token=1)))
            assert caught.value.code() == Code.NOT_FOUND
    asyncio.run(scenario())


def spawned_children() -> set[psutil.Process]:
    """This process's children started by multiprocessing's spawn (data-parallel replicas; not
    its resource tracker, which stays for the process's life)."""
    found = set()
    for child in psutil.Process().children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.add(child)
        except psutil.NoSuchProcess:
            pass
    return found


def test_a_replaced_data_parallel_session_stops_its_replica_processes(tmp_path) -> None:
    async def scenario() -> None:
        async with trainer(tmp_path, device_ids=["cpu:0", "cpu:1"]) as (stub, registry):
            before = spawned_children()
            await stub.CreateSession(create_request(lease=lease(token=1), device_ids=["cpu:0", "cpu:1"]))
            started = list(spawned_children() - before)
            assert len(started) == 1, "a two-device session runs one replica process"
            await create(stub, token=2)
            gone, alive = psutil.wait_procs(started, timeout=5)
            assert alive == [], f"replica processes of the replaced session still run: {alive}"
    asyncio.run(scenario())


def test_sessions_of_the_same_attempt_stay_open(tmp_path) -> None:
    async def scenario() -> None:
        async with trainer(tmp_path) as (stub, registry):
            first = await create(stub, token=3)
            second = await create(stub, token=3)  # a multi-agent job: one session per agent
            assert set(registry._entries) == {first, second}
    asyncio.run(scenario())


def test_an_idle_session_expires_after_the_ttl_and_a_used_one_does_not(tmp_path) -> None:
    async def scenario() -> None:
        async with trainer(tmp_path, idle_ttl_s=0.6) as (stub, registry):
            idle, used = await create(stub, token=1), await create(stub, token=1, job="job-2")
            idle_model = model_of(registry, idle)
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                await stub.GetSession(pb.GetSessionRequest(session_id=used))
                await registry.reap_idle()
                await asyncio.sleep(0.1)
            assert "idle" in await not_found(stub, idle)
            assert_freed(idle_model)
            assert list(registry._entries) == [used]
    asyncio.run(scenario())


def test_the_reaper_of_a_trainer_built_from_settings_closes_idle_sessions(tmp_path) -> None:
    async def scenario() -> None:
        settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, device="cpu",
                                   scheduler_address="127.0.0.1:1", session_idle_ttl_seconds=0.4)
        started = await start_server(settings, await build_plan(settings))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{started.port}") as channel:
                stub = pb_grpc.TrainerServiceStub(channel)
                session_id = await create(stub, token=1)
                await asyncio.sleep(1.2)
                assert "idle" in await not_found(stub, session_id)
        finally:
            await stop_server(started, grace_seconds=1)
    asyncio.run(scenario())


def test_the_schedulers_word_closes_stale_and_stopped_jobs_sessions(tmp_path) -> None:
    """What the Trainer's WorkerAgent learns from heartbeats: a new assignment, a stopped job."""
    async def scenario() -> None:
        async with trainer(tmp_path) as (stub, registry):
            settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path)
            agent = WorkerRegistration.for_settings(settings, role="trainer", **attempt_callbacks(registry)).agent
            stale, stopped, kept = (await create(stub, token=1), await create(stub, token=1, job="job-2"),
                                    await create(stub, token=1, job="job-3"))
            await agent.on_assignment(job_pb2.Assignment(lease=lease(token=2)))  # re-queued here
            assert "newer attempt" in await not_found(stub, stale)
            with pytest.raises(grpc.aio.AioRpcError) as caught:  # and its old lease is stale now
                await stub.CreateSession(create_request(lease=lease(token=1)))
            assert caught.value.code() == Code.FAILED_PRECONDITION
            await agent.on_stop("job-2")  # cancelled, ended, or its lease moved away
            assert "job-2" in await not_found(stub, stopped)
            await agent.on_stop("job-unknown")
            assert list(registry._entries) == [kept]
    asyncio.run(scenario())


def test_an_idle_session_of_an_attempt_assigned_here_lives_as_long_as_its_lease(tmp_path) -> None:
    """A long rollout may leave the Trainer idle past the TTL: the lease, not the clock, decides."""
    async def scenario() -> None:
        async with trainer(tmp_path, idle_ttl_s=0.3) as (stub, registry):
            settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path)
            agent = WorkerRegistration.for_settings(settings, role="trainer", **attempt_callbacks(registry)).agent
            await agent.on_assignment(job_pb2.Assignment(lease=lease(token=1)))
            leased = await create(stub, token=1)
            await asyncio.sleep(0.5)
            await registry.reap_idle()
            assert list(registry._entries) == [leased]
            await agent.on_stop("job-1")
            assert "no longer runs job 'job-1'" in await not_found(stub, leased)
    asyncio.run(scenario())


def test_a_stopped_jobs_data_parallel_call_waiting_on_a_silent_replica_ends_at_once(tmp_path) -> None:
    """A replica that never answers (stopped here with SIGSTOP: what a rank on a host cut off
    from this one looks like) would hold ForwardBackward, and the Trainer's torch thread, for
    good. The Scheduler's word that the job stopped breaks the replicas' links: the call fails
    with ReplicaError and the session closes within seconds."""
    import os
    import signal

    from opentinker_runtime.edge.lease import LeaseContext
    from opentinker_trainer.collectives import ReplicaError
    from opentinker_trainer.config import LossConfig, LossFunction
    from tests.trainer.helpers import rl_datums, spec

    ppo = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.2)

    async def scenario() -> None:
        registry = build_registry(tmp_path, "cpu", device_ids=["cpu:0", "cpu:1"])
        held = LeaseContext(job_id="job-dp", lease_id="l-1", fencing_token=1)
        view = await registry.create(spec(job_id="job-dp"), lease=held, device_ids=("cpu:0", "cpu:1"))
        replica = registry._entries[view.session_id].session.replicas.local_processes[0]
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            call = asyncio.create_task(registry.forward_backward(view.session_id, held, rl_datums(count=4), ppo))
            await asyncio.sleep(2.0)
            assert not call.done()  # waiting for the silent replica
            started = time.monotonic()
            assert await asyncio.wait_for(registry.job_stopped("job-dp"), timeout=15) == [view.session_id]
            with pytest.raises(ReplicaError):
                await call
            assert time.monotonic() - started < 15
        finally:
            if replica.is_alive():  # closing the session kills it
                os.kill(replica.pid, signal.SIGCONT)
            await registry.close_all()
    asyncio.run(scenario())
