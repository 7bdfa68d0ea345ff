"""The lease table against a model, driven by Hypothesis: acquire / renew / release / expire.

Invariant: no slot is ever held by two unexpired leases, and Redis agrees with a simple model
about which leases are alive, which slots are busy, and which calls succeed. Fencing tokens
strictly increase.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule, run_state_machine_as_test

from opentinker.core.redis_store import Keys, connect
from opentinker_scheduler.leases import LeaseTable, LeaseUnavailable
from opentinker_scheduler.lua import Scripts
from opentinker_scheduler.model import Device, Lease, Role, WorkerRegistration
from opentinker_scheduler.workers import WorkerRegistry
from tests.scheduler._harness import ManualClock

WORKERS = ("w0", "w1")
SLOTS = ("cpu:0", "cpu:1", "cpu:2")
TTL_MS = 1_000
FOREVER_MS = 10**12


@dataclass
class ModelLease:
    lease: Lease
    expire_ms: int


class LeaseMachine(RuleBasedStateMachine):
    leases = Bundle("leases")

    def __init__(self, redis_url: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.client = connect(redis_url)
        self.clock = ManualClock()
        keys, scripts = Keys(), Scripts.register(self.client)
        self.table = LeaseTable(client=self.client, keys=keys, scripts=scripts, clock=self.clock)
        registry = WorkerRegistry(client=self.client, keys=keys, scripts=scripts, clock=self.clock)
        self.run(self.client.flushdb())
        for worker_id in WORKERS:
            devices = tuple(Device(device_id=slot) for slot in SLOTS)
            self.run(registry.put(WorkerRegistration(worker_id=worker_id, role=Role.TRAINER,
                                                     address="h:1", devices=devices), ttl_ms=FOREVER_MS))
        self.model: dict[str, ModelLease] = {}
        self.last_token = 0

    def run(self, coroutine):  # noqa: ANN001, ANN201
        return self.loop.run_until_complete(coroutine)

    def teardown(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()

    def alive(self) -> dict[str, ModelLease]:
        now = self.clock.now_ms()
        return {lease_id: m for lease_id, m in self.model.items() if m.expire_ms > now}

    def held(self, worker_id: str) -> set[str]:
        return {slot for m in self.alive().values() if m.lease.worker_id == worker_id for slot in m.lease.slots}

    @rule(target=leases, worker_id=st.sampled_from(WORKERS),
          slots=st.lists(st.sampled_from(SLOTS), min_size=1, max_size=3, unique=True),
          job=st.sampled_from(("j1", "j2", "j3")))
    def acquire(self, worker_id: str, slots: list[str], job: str):  # noqa: ANN201
        expected_ok = not (set(slots) & self.held(worker_id))
        try:
            lease = self.run(self.table.acquire(job_id=job, worker_id=worker_id, role=Role.TRAINER,
                                                slots=slots, device_ids=slots, ttl_ms=TTL_MS))
        except LeaseUnavailable:
            assert not expected_ok, f"acquire {worker_id}{slots} refused though free"
            return multiple()
        assert expected_ok, f"acquire {worker_id}{slots} granted though held: {self.held(worker_id)}"
        assert lease.fencing_token > self.last_token
        self.last_token = lease.fencing_token
        self.model[lease.lease_id] = ModelLease(lease=lease, expire_ms=self.clock.now_ms() + TTL_MS)
        return lease.lease_id

    @rule(lease_id=leases)
    def renew(self, lease_id: str) -> None:
        expected_ok = lease_id in self.alive()
        assert self.run(self.table.renew(lease_id, ttl_ms=TTL_MS)) == expected_ok
        if expected_ok:
            self.model[lease_id].expire_ms = self.clock.now_ms() + TTL_MS

    @rule(lease_id=leases)
    def release(self, lease_id: str) -> None:
        released = self.run(self.table.release(lease_id))
        assert (released is not None) == (lease_id in self.model)
        self.model.pop(lease_id, None)

    @rule(ms=st.integers(min_value=0, max_value=1_500))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def expire(self) -> None:
        """The allocator's sweep: release every lease whose TTL passed."""
        for lease_id in self.run(self.table.expired_ids(limit=1000)):
            assert self.run(self.table.release(lease_id, only_if_expired=True)) is not None
            assert lease_id in self.model and lease_id not in self.alive()
            del self.model[lease_id]

    @invariant()
    def no_slot_leased_twice_and_redis_matches_the_model(self) -> None:
        for worker_id in WORKERS:
            busy = self.run(self.table.busy_slots(worker_id, SLOTS))
            assert busy == self.held(worker_id)
            owners = [slot for m in self.alive().values() if m.lease.worker_id == worker_id
                      for slot in m.lease.slots]
            assert len(owners) == len(set(owners)), f"slot leased twice on {worker_id}: {owners}"
            stored = {lease.lease_id for lease in self.run(self.table.of_worker(worker_id))}
            assert stored == {i for i, m in self.model.items() if m.lease.worker_id == worker_id}


@pytest.mark.timeout(120)
def test_no_device_is_ever_leased_twice(redis_url: str) -> None:
    run_state_machine_as_test(lambda: LeaseMachine(redis_url), settings=settings(
        max_examples=40, stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
