"""Pure placement rules, and the Redis keys the scheduler added to `Keys`."""

from __future__ import annotations

from opentinker_runtime.core.redis_store import Keys
from opentinker_scheduler.model import Device, DeviceKind, ResourceRequest, Role, Worker, WorkerState
from opentinker_scheduler.placement import COORDINATOR_REQUEST, place, worker_slots

GIB = 1 << 30


def worker(worker_id: str, role: Role, *devices: Device) -> Worker:
    return Worker(worker_id=worker_id, role=role, address="h:1", devices=devices, state=WorkerState.ALIVE,
                  register_time_ms=0, last_heartbeat_time_ms=0, heartbeat_ttl_ms=1000)


def gpu(index: int, memory_gib: int) -> Device:
    return Device(device_id=f"cuda:{index}", kind=DeviceKind.CUDA, memory_bytes=memory_gib * GIB)


def test_placement_matches_kind_and_memory_and_prefers_the_freest_worker() -> None:
    small = worker("a-small", Role.TRAINER, gpu(0, 16), gpu(1, 16), gpu(2, 16))
    big = worker("b-big", Role.TRAINER, gpu(0, 80), gpu(1, 80))
    coordinator = worker("c", Role.COORDINATOR)
    free = {"a-small": ["cuda:0", "cuda:1", "cuda:2"], "b-big": ["cuda:0", "cuda:1"],
            "c": list(worker_slots(coordinator, 2))}
    two_big = ResourceRequest(role=Role.TRAINER, device_count=2, device_kind=DeviceKind.CUDA,
                              min_memory_bytes=40 * GIB)
    plan = place([two_big, COORDINATOR_REQUEST], [small, big, coordinator], free)
    assert [(p.worker.worker_id, p.device_ids) for p in plan] == [("b-big", ("cuda:0", "cuda:1")), ("c", ())]
    assert plan[1].slots == ("slot:0",)
    any_one = ResourceRequest(role=Role.TRAINER)
    assert place([any_one], [small, big], free)[0].worker.worker_id == "a-small"  # most free
    cpu_only = ResourceRequest(role=Role.TRAINER, device_kind=DeviceKind.CPU)
    assert place([cpu_only], [small, big], free) == (
        "waiting for 1 trainer slot (cpu) on one worker: 2 alive trainer workers, at most 0 free on one")


def test_two_requests_of_one_role_never_share_a_slot() -> None:
    trainer = worker("t", Role.TRAINER, Device(device_id="cpu:0"), Device(device_id="cpu:1"))
    one = ResourceRequest(role=Role.TRAINER)
    plan = place([one, one], [trainer], {"t": ["cpu:0", "cpu:1"]})
    assert [p.slots for p in plan] == [("cpu:0",), ("cpu:1",)]
    assert isinstance(place([one, one, one], [trainer], {"t": ["cpu:0", "cpu:1"]}), str)


def test_new_keys_keep_the_prefix_and_do_not_collide() -> None:
    keys = Keys()
    built = [keys.job("j1"), keys.job_events("j1"), keys.job_metrics("j1"), keys.job_request("j1", "r1"),
             keys.job_stopping("j1"), keys.job_index(), keys.job_counter(), keys.job_queue(),
             keys.lease("lease-1"), keys.job_leases("j1"), keys.worker_leases("w1"),
             keys.lease_expiry(), keys.worker_slots("w1"), keys.fencing_counter(),
             keys.allocator_lock(), keys.worker("w1"), keys.worker_index(), keys.running_jobs(),
             keys.tenant_usage(), keys.tenant_api_keys("acme"), keys.allocator_wake()]
    assert all(key.startswith("ot:") for key in built) and len(set(built)) == len(built)
    assert keys.worker_slots("trainer@127.0.0.1:50052") == "ot:worker-slots:trainer@127.0.0.1:50052"
    prefixes = keys.lease_key_prefixes()  # what the Lua scripts build key names from
    assert prefixes["record"] + "l-1" == keys.lease("l-1")
    assert prefixes["worker_leases"] + "w1" == keys.worker_leases("w1")
    assert prefixes["slots"] + "w1" == keys.worker_slots("w1")
