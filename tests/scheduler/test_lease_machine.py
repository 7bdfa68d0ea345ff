"""The lease table against a model, driven by Hypothesis: acquire (one job's leases on several
workers, all or none: the Lua functions START uses) / renew / release / expire / worker death
and re-registration.

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

from opentinker_runtime.core.redis_store import Keys, connect
from opentinker_scheduler.leases import LeaseDraft, LeaseTable, LeaseUnavailable
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
        self.registry = WorkerRegistry(client=self.client, keys=keys, scripts=scripts, clock=self.clock)
        self.run(self.client.flushdb())
        for worker_id in WORKERS:
            self.register(worker_id)
        self.model: dict[str, ModelLease] = {}
        self.worker_expire = {worker_id: self.clock.now_ms() + FOREVER_MS for worker_id in WORKERS}
        self.last_token = 0

    def worker_alive(self, worker_id: str) -> bool:
        return self.worker_expire[worker_id] > self.clock.now_ms()

    def register(self, worker_id: str) -> None:
        devices = tuple(Device(device_id=slot) for slot in SLOTS)
        self.run(self.registry.put(WorkerRegistration(worker_id=worker_id, role=Role.TRAINER,
                                                      address="h:1", devices=devices), ttl_ms=FOREVER_MS))

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

    @rule(target=leases, job=st.sampled_from(("j1", "j2", "j3")), wanted=st.lists(
        st.tuples(st.sampled_from(WORKERS), st.lists(st.sampled_from(SLOTS), min_size=1, max_size=3, unique=True)),
        min_size=1, max_size=2, unique_by=lambda pair: pair[0]))
    def acquire(self, job: str, wanted: list[tuple[str, list[str]]]):  # noqa: ANN201
        """One job's leases on one or two workers: all granted or none."""
        expected_ok = all(self.worker_alive(w) and not set(slots) & self.held(w) for w, slots in wanted)
        drafts = [LeaseDraft(worker_id=w, role=Role.TRAINER, slots=tuple(slots), device_ids=tuple(slots))
                  for w, slots in wanted]
        try:
            granted = self.run(self.table.acquire_all(job_id=job, drafts=drafts, ttl_ms=TTL_MS))
        except LeaseUnavailable:
            assert not expected_ok, f"acquire {wanted} refused though free"
            return multiple()
        assert expected_ok, f"acquire {wanted} granted though held or dead: {self.worker_expire}"
        for lease in granted:
            assert lease.fencing_token > self.last_token
            self.last_token = lease.fencing_token
            self.model[lease.lease_id] = ModelLease(lease=lease, expire_ms=self.clock.now_ms() + TTL_MS)
        return multiple(*(lease.lease_id for lease in granted))

    @rule(worker_id=st.sampled_from(WORKERS))
    def worker_dies(self, worker_id: str) -> None:
        """The worker stops heartbeating: it is dead at once (its TTL passes) and its leases
        are no longer renewed; they expire on their own TTL."""
        self.run(self.client.hset(self.table.keys.worker(worker_id), "expire_at", self.clock.now_ms()))
        self.worker_expire[worker_id] = self.clock.now_ms()

    @rule(worker_id=st.sampled_from(WORKERS))
    def worker_registers_again(self, worker_id: str) -> None:
        """A restart: as WorkerPool.register does, the old registration's leases are released."""
        for lease in self.run(self.table.of_worker(worker_id)):
            assert self.run(self.table.release(lease.lease_id)) is not None
            del self.model[lease.lease_id]
        self.register(worker_id)
        self.worker_expire[worker_id] = self.clock.now_ms() + FOREVER_MS

    @rule(lease_id=leases)
    def renew(self, lease_id: str) -> None:
        """A heartbeat of the lease's worker: renews the worker and the lease for TTL_MS; a dead
        worker (stopped heartbeating, TTL passed) renews nothing and must register again."""
        worker_id = self.model[lease_id].lease.worker_id if lease_id in self.model else None
        worker_alive = worker_id is not None and self.worker_alive(worker_id)
        expected_ok = lease_id in self.alive() and worker_alive
        assert self.run(self.table.renew(lease_id, ttl_ms=TTL_MS)) == expected_ok
        if worker_alive:
            self.worker_expire[worker_id] = self.clock.now_ms() + TTL_MS
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
            busy = self.run(self.table.busy_slots(worker_id))
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
