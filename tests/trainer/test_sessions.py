"""SessionRegistry: fencing tokens, lease/job checks, idempotent requests, lock discipline."""

from __future__ import annotations

import asyncio
import time

import pytest

from opentinker_runtime.edge.lease import LeaseContext, StaleFencingToken
from opentinker_trainer.errors import RequestIdReusedError, SessionNotFoundError, ValidationError
from opentinker_trainer.sessions import RequestKey, SessionRegistry
from tests.trainer.helpers import CE, sft_datums, spec


def run(coroutine):
    return asyncio.run(coroutine)


def lease(token: int, job: str = "job-1") -> LeaseContext:
    return LeaseContext(job_id=job, lease_id="l", fencing_token=token)


async def open_session(registry: SessionRegistry, token: int = 5) -> str:
    view = await registry.create(spec(job_id="job-1"), lease=lease(token))
    return view.session_id


def step_work(session):
    session.forward_backward(sft_datums()[:1], CE)
    return session.optim_step()


def test_lower_fencing_token_is_refused_and_higher_ones_raise_the_bar(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path)
        sid = await open_session(registry, token=5)
        with pytest.raises(StaleFencingToken, match="fencing_token: 4 is stale for job 'job-1'"):
            await registry.run(sid, lease(4), step_work)
        await registry.run(sid, lease(6), step_work)
        with pytest.raises(StaleFencingToken, match="has seen 6"):
            await registry.run(sid, lease(5), step_work)
        with pytest.raises(StaleFencingToken):
            await registry.create(spec(job_id="job-1"), lease=lease(2))
        assert registry.view(sid).step == 1
    run(scenario())


def test_a_lease_of_another_job_is_refused(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path)
        sid = await open_session(registry)
        with pytest.raises(ValidationError, match="lease.job_id: 'job-2' is not the job"):
            await registry.run(sid, lease(9, job="job-2"), step_work)
        with pytest.raises(ValidationError, match="lease.job_id"):
            await registry.close(sid, LeaseContext())
    run(scenario())


def test_a_retried_request_id_applies_once(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path)
        sid = await open_session(registry)
        key = RequestKey(kind="OptimStep", request_id="r1", fingerprint="a")
        first = await registry.run(sid, lease(5), step_work, request=key)
        again = await registry.run(sid, lease(5), step_work, request=key)
        assert again is first and registry.view(sid).step == 1
        other = RequestKey(kind="OptimStep", request_id="r1", fingerprint="b")
        with pytest.raises(RequestIdReusedError, match="'r1' was already used"):
            await registry.run(sid, lease(5), step_work, request=other)
    run(scenario())


def test_create_with_a_request_id_is_idempotent_and_close_forgets(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path)
        key = RequestKey(kind="CreateSession", request_id="c1", fingerprint="x")
        first = await registry.create(spec(), lease=LeaseContext(), request=key)
        second = await registry.create(spec(), lease=LeaseContext(), request=key)
        assert first.session_id == second.session_id
        assert (await registry.close(first.session_id, LeaseContext())).session_id == first.session_id
        with pytest.raises(SessionNotFoundError, match="no open session"):
            registry.view(first.session_id)
        with pytest.raises(ValidationError, match="session_id: is required"):
            registry.view("")
    run(scenario())


def test_a_cancelled_caller_keeps_the_lock_until_its_thread_ends(tmp_path) -> None:
    events: list[str] = []

    def slow(session) -> None:
        events.append("slow-start")
        time.sleep(0.3)
        events.append("slow-end")

    def quick(session) -> None:
        events.append("quick")

    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path)
        sid = await open_session(registry)
        first = asyncio.create_task(registry.run(sid, None, slow))
        await asyncio.sleep(0.05)
        first.cancel()
        await registry.run(sid, None, quick)
        assert first.cancelled()
    run(scenario())
    assert events == ["slow-start", "slow-end", "quick"]


def test_sessions_run_on_the_devices_they_ask_for_among_those_offered(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, device_ids=("cpu:0", "cpu:1"))
        default = await registry.create(spec(job_id="job-1"), lease=lease(1))
        assert default.device_ids == ("cpu:0",)
        second = await registry.create(spec(job_id="job-1"), lease=lease(1), device_ids=["cpu:1"])
        assert second.device_ids == ("cpu:1",)
        with pytest.raises(ValidationError, match=r"device_ids: \['cuda:0'\] are not devices of "
                                                  r"this worker; it offers \['cpu:0', 'cpu:1'\]"):
            await registry.create(spec(job_id="job-1"), lease=lease(1), device_ids=["cpu:0", "cuda:0"])
        with pytest.raises(ValidationError, match="lists a device twice"):
            await registry.create(spec(job_id="job-1"), lease=lease(1), device_ids=["cpu:1", "cpu:1"])
    run(scenario())
