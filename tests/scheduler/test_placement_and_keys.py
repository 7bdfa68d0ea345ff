"""Pure placement rules, and the Redis keys the scheduler added to `Keys`."""

from __future__ import annotations

from opentinker_runtime.core.redis_store import Keys
import dataclasses

from opentinker_scheduler.model import Device, DeviceKind, ResidentModel, ResourceRequest, Role, Worker, WorkerState
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


def test_a_trainer_request_no_one_worker_can_serve_spreads_across_the_fewest_workers() -> None:
    """Data-parallel ranks on any host: one worker when one has them all, else as few workers as
    will do (most free first, ties by id), one placement (lease) each; never a rollout request."""
    cpus = lambda n: [Device(device_id=f"cpu:{i}") for i in range(n)]  # noqa: E731
    a, b, c = (worker(name, Role.TRAINER, *cpus(n)) for name, n in (("a", 1), ("b", 2), ("c", 1)))
    free = {"a": ["cpu:0"], "b": ["cpu:0", "cpu:1"], "c": ["cpu:0"]}
    two, three, four = (ResourceRequest(role=Role.TRAINER, device_count=n) for n in (2, 3, 4))
    assert [(p.worker.worker_id, p.device_ids) for p in place([two], [a, b, c], free)] == [("b", ("cpu:0", "cpu:1"))]
    assert [(p.worker.worker_id, p.device_ids) for p in place([three], [a, b, c], free)] == [
        ("b", ("cpu:0", "cpu:1")), ("a", ("cpu:0",))]
    assert [p.worker.worker_id for p in place([four], [a, b, c], free)] == ["b", "a", "c"]
    assert place([ResourceRequest(role=Role.TRAINER, device_count=5)], [a, b, c], free) == (
        "waiting for 5 trainer slots (any device) across trainer workers: 3 alive trainer workers, 4 free in all")
    # a second request of the job sees what the first took
    assert isinstance(place([three, two], [a, b, c], free), str)
    rollouts = [worker(name, Role.ROLLOUT, *cpus(1)) for name in ("r1", "r2")]
    assert isinstance(place([ResourceRequest(role=Role.ROLLOUT, device_count=2)], rollouts,
                            {"r1": ["cpu:0"], "r2": ["cpu:0"]}), str)


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


def shared_gpu(index: int, shares: int) -> Device:
    return Device(device_id=f"cuda:{index}", kind=DeviceKind.CUDA, memory_bytes=80 * GIB, shares=shares)


LORA_ONE = ResourceRequest(role=Role.TRAINER, shared=True)
WHOLE_ONE = ResourceRequest(role=Role.TRAINER)


def test_a_device_with_shares_hosts_that_many_lora_jobs_and_no_whole_request_while_shared() -> None:
    trainer = worker("t", Role.TRAINER, shared_gpu(0, 4))
    assert worker_slots(trainer, 1) == ("cuda:0#0", "cuda:0#1", "cuda:0#2", "cuda:0#3")
    free = list(worker_slots(trainer, 1))
    plan = place([LORA_ONE] * 4, [trainer], {"t": free})
    assert [p.slots for p in plan] == [("cuda:0#0",), ("cuda:0#1",), ("cuda:0#2",), ("cuda:0#3",)]
    assert all(p.device_ids == ("cuda:0",) for p in plan)  # the worker hears of its device, not a share
    assert isinstance(place([LORA_ONE] * 5, [trainer], {"t": free}), str)
    assert isinstance(place([WHOLE_ONE], [trainer], {"t": free[1:]}), str)  # one share is taken
    whole = place([WHOLE_ONE], [trainer], {"t": free})[0]
    assert whole.slots == tuple(free) and whole.device_ids == ("cuda:0",)


def test_lora_jobs_pack_onto_the_device_and_worker_already_shared() -> None:
    first = worker("a", Role.TRAINER, shared_gpu(0, 4), shared_gpu(1, 4))
    second = worker("b", Role.TRAINER, shared_gpu(0, 4), shared_gpu(1, 4))
    free = {"a": ["cuda:0#0", "cuda:0#1", "cuda:0#2", "cuda:0#3", "cuda:1#1", "cuda:1#2", "cuda:1#3"],
            "b": list(worker_slots(second, 1))}
    plan = place([LORA_ONE], [first, second], free)[0]
    assert (plan.worker.worker_id, plan.slots) == ("a", ("cuda:1#1",))  # cuda:1 is shared already
    whole = place([WHOLE_ONE], [first, second], free)[0]
    assert whole.worker.worker_id == "b"  # whole devices spread to the freest worker


def test_devices_without_shares_serve_a_lora_job_whole() -> None:
    trainer = worker("t", Role.TRAINER, Device(device_id="cpu:0"), Device(device_id="cpu:1"))
    plan = place([LORA_ONE, LORA_ONE], [trainer], {"t": ["cpu:0", "cpu:1"]})
    assert [p.slots for p in plan] == [("cpu:0",), ("cpu:1",)]


def test_a_lora_jobs_single_devices_are_shares_unless_dedicated_and_full_jobs_take_whole_devices() -> None:
    from google.protobuf import json_format

    from opentinker_runtime.jobplan import resolve_job_plan
    from opentinker_scheduler.spec_facts import resource_requests
    from tests.jobplan.specs import LEAST, least_spec

    assert all(r.shared for r in resource_requests(resolve_job_plan(least_spec("RL"))))
    assert all(r.shared for r in resource_requests(resolve_job_plan(least_spec("MULTI_AGENT"))))
    full = dict(LEAST["RL"], policy={**LEAST["RL"]["policy"], "adaptation": {"full": {}}})
    assert not any(r.shared for r in resource_requests(resolve_job_plan(json_format.ParseDict(full, least_spec("RL").__class__()))))
    asked = dict(LEAST["RL"], resources=[
        {"role": "ROLE_TRAINER", "device_count": 1, "dedicated_device": True},
        {"role": "ROLE_ROLLOUT", "device_count": 1},
        {"role": "ROLE_TRAINER", "device_count": 2}])
    requests = resource_requests(resolve_job_plan(json_format.ParseDict(asked, least_spec("RL").__class__())))
    assert [r.shared for r in requests] == [False, True, False]
    assert requests[1].model_keys == ("builtin:tiny-llama@0/default",)
    assert requests[0].model_keys == requests[2].model_keys == ()  # whole devices: no base to look for


TINY, SMALL = "builtin:tiny-llama@0/default", "builtin:small-llama@0/default"


def test_a_lora_job_goes_where_its_base_is_resident_before_packing() -> None:
    # worker a is the fuller, but holds another base; b holds this job's base on cuda:1
    a = dataclasses.replace(worker("a", Role.TRAINER, shared_gpu(0, 4)),
                            resident_models=(ResidentModel(device_id="cuda:0", model_key=SMALL, job_ids=("j1", "j2")),))
    b = dataclasses.replace(worker("b", Role.TRAINER, shared_gpu(0, 4), shared_gpu(1, 4)),
                            resident_models=(ResidentModel(device_id="cuda:1", model_key=TINY, job_ids=("j3",)),))
    free = {"a": ["cuda:0#2", "cuda:0#3"], "b": ["cuda:0#0", "cuda:0#1", "cuda:0#2", "cuda:0#3", "cuda:1#1",
                                                   "cuda:1#2", "cuda:1#3"]}
    tiny_job = dataclasses.replace(LORA_ONE, model_keys=(TINY,))
    plan = place([tiny_job], [a, b], free)[0]
    assert (plan.worker.worker_id, plan.slots) == ("b", ("cuda:1#1",))
    small_job = dataclasses.replace(LORA_ONE, model_keys=(SMALL,))
    assert place([small_job], [a, b], free)[0].worker.worker_id == "a"
    other = dataclasses.replace(LORA_ONE, model_keys=("local:/m/x/default",))  # resident nowhere: pack
    assert place([other], [a, b], free)[0].worker.worker_id == "a"
    full = {"a": free["a"], "b": ["cuda:0#0", "cuda:0#1", "cuda:0#2", "cuda:0#3"]}  # its base's device is full
    assert place([tiny_job], [a, b], full)[0].worker.worker_id == "a"
