"""The registry's cycles: concurrent ForwardBackward calls of sessions on one shared base are
gathered into one batched pass; retries, cancellation, closing and failure stay per session."""

from __future__ import annotations

import asyncio

import pytest

from opentinker_runtime.edge.lease import LeaseContext
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.batching import Datum
from opentinker_trainer.errors import SessionNotFoundError, ValidationError
from opentinker_trainer.sessions import RequestKey, SessionRegistry
from tests.trainer.helpers import PPO, rl_datums, spec

LORA = LoraSpec(rank=4, alpha=8.0)


def lease(job: str) -> LeaseContext:
    return LeaseContext(job_id=job, lease_id="l", fencing_token=1)


async def open_sessions(registry: SessionRegistry, count: int) -> list[str]:
    views = [await registry.create(spec(lora=LORA, seed=i, job_id=f"job-{i}", model="tiny-llama"), lease=lease(f"job-{i}"))
             for i in range(count)]
    return [view.session_id for view in views]


async def step(registry: SessionRegistry, session_id: str, index: int, request_id: str = ""):
    key = RequestKey(kind="ForwardBackward", request_id=request_id, fingerprint="f") if request_id else None
    return await registry.forward_backward(session_id, lease(f"job-{index}"), rl_datums(seed=index), PPO,
                                           request=key)


def test_concurrent_calls_of_a_base_run_in_one_cycle_and_a_lone_call_does_not_wait(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, cycle_gather_s=5.0)
        ids = await open_sessions(registry, 3)
        results = await asyncio.gather(*(step(registry, sid, i) for i, sid in enumerate(ids)))
        assert [r.cycle["cycle/sessions"] for r in results] == [3.0, 3.0, 3.0]
        assert sum(r.cycle["cycle/token_share"] for r in results) == pytest.approx(1.0)
        # the caller hears only its share of the pass's time, nothing of the other sessions
        assert [set(r.reported_cycle) for r in results] == [{"cycle/share_seconds"}] * 3
        pass_seconds = sum(r.reported_cycle["cycle/share_seconds"] for r in results)
        assert 0 < pass_seconds <= results[0].cycle["cycle/seconds"] + 1e-9
        assert [registry.view(sid).pending_datums for sid in ids] == [4, 4, 4]
        for sid in ids[1:]:
            await registry.close(sid, lease(f"job-{ids.index(sid)}"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        alone = await step(registry, ids[0], 0)  # the base's one session: no gathering wait
        assert alone.cycle["cycle/sessions"] == 1.0 and loop.time() - started < 4.0
    asyncio.run(scenario())


def test_a_retried_request_is_answered_from_memory_not_run_again(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, cycle_gather_s=0.0)
        ids = await open_sessions(registry, 2)
        first = await step(registry, ids[0], 0, request_id="r1")
        again = await step(registry, ids[0], 0, request_id="r1")
        assert again is first and registry.view(ids[0]).pending_datums == 4
    asyncio.run(scenario())


def test_a_caller_that_gives_up_while_queued_leaves_the_cycle(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, cycle_gather_s=30.0)
        ids = await open_sessions(registry, 3)
        await asyncio.gather(*(step(registry, sid, i) for i, sid in enumerate(ids)))  # all three active
        waiting = asyncio.create_task(step(registry, ids[0], 0))
        await asyncio.sleep(0.2)  # queued, gathering for the others
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert registry.view(ids[0]).pending_datums == 4
        results = await asyncio.wait_for(asyncio.gather(*(step(registry, sid, i) for i, sid in enumerate(ids))), 60)
        assert [r.cycle["cycle/sessions"] for r in results] == [3.0, 3.0, 3.0]
        assert registry.view(ids[0]).pending_datums == 8
    asyncio.run(scenario())


def test_one_sessions_bad_call_or_closing_never_fails_the_others(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, cycle_gather_s=5.0)
        ids = await open_sessions(registry, 3)
        bad = registry.forward_backward(ids[1], lease("job-1"), [Datum(tokens=(1, 2), loss_mask=(1.0,))], PPO)
        outcomes = await asyncio.gather(step(registry, ids[0], 0), bad, step(registry, ids[2], 2),
                                        return_exceptions=True)
        assert isinstance(outcomes[1], ValidationError)
        assert outcomes[0].cycle["cycle/sessions"] == 2.0 and outcomes[2].cycle["cycle/sessions"] == 2.0
        await registry.close(ids[2], lease("job-2"))
        with pytest.raises(SessionNotFoundError):
            await step(registry, ids[2], 2)
        survivors = await asyncio.gather(step(registry, ids[0], 0), step(registry, ids[1], 1))
        assert [r.cycle["cycle/sessions"] for r in survivors] == [2.0, 2.0]
    asyncio.run(scenario())


def test_without_sharing_every_session_loads_its_own_base_and_runs_alone(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, share_lora_base=False)
        ids = await open_sessions(registry, 2)
        results = await asyncio.gather(*(step(registry, sid, i) for i, sid in enumerate(ids)))
        assert all(r.cycle == {} for r in results)
        assert registry.bases is None
    asyncio.run(scenario())


def test_sessions_that_send_nothing_are_not_waited_for(tmp_path) -> None:
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, cycle_gather_s=5.0)
        ids = await open_sessions(registry, 3)  # two of them stay idle
        loop = asyncio.get_running_loop()
        started = loop.time()
        for _ in range(3):
            result = await step(registry, ids[0], 0)
            assert result.cycle["cycle/sessions"] == 1.0
        assert loop.time() - started < 5.0
    asyncio.run(scenario())


def test_the_registry_reports_each_shared_base_with_the_jobs_on_it(tmp_path) -> None:
    """What the Trainer's heartbeats tell the Scheduler (placement, ListWorkers)."""
    async def scenario() -> None:
        registry = SessionRegistry(checkpoint_root=tmp_path, device_ids=("cpu:0", "cpu:1"))
        ids = await open_sessions(registry, 2)
        await registry.create(spec(lora=LORA, seed=5, job_id="job-small", model="small-llama"), lease=lease("job-small"),
                              device_ids=["cpu:1"])
        await registry.create(spec(seed=0, job_id="job-full", model="tiny-llama"), lease=lease("job-full"))
        held = [(m.device_id, m.model_key, m.job_ids) for m in registry.resident_models()]
        assert held == [("cpu:0", "builtin:tiny-llama@0/default", ("job-0", "job-1")),
                        ("cpu:1", "builtin:small-llama@0/default", ("job-small",))]  # a full session holds its own
        await registry.close(ids[0], lease("job-0"))
        assert [m.job_ids for m in registry.resident_models()][0] == ("job-1",)
        private = SessionRegistry(checkpoint_root=tmp_path, share_lora_base=False)
        await open_sessions(private, 1)
        assert private.resident_models() == []  # nothing shared, nothing to place by
    asyncio.run(scenario())
