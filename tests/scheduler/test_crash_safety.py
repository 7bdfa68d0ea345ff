"""Crash safety with real processes: scheduler processes (`python -m opentinker_scheduler`),
worker processes (`tests/scheduler/_worker_process.py`, one real `WorkerAgent` each) and the
session's real Redis.

What the issue tracker promises and these tests check:

1. Restart safety: all state is in Redis; a SIGKILLed scheduler's successor continues with every
   job, lease and event intact (and request_id idempotency survives the restart).
2. Two scheduler replicas may run at once; one allocator at a time (a Redis lock with a TTL); the
   other takes over when the holder dies, and no device is ever leased to two jobs.
3. CancelJob stops the job on every worker and frees its devices within seconds.

Two tests pin bugs they once reproduced deterministically: an outage shorter than the worker
TTL lost the leases (the WorkerAgent reconnected on gRPC's default backoff: attempts ~1, 2.6,
5.2 s after the first failure; it now caps the backoff at 0.5 s), and a scheduler killed
between releasing a lease and re-queueing its job left that job RUNNING forever (a job is now
handled before its lease is released, and the expiry sweep re-queues any RUNNING job whose
lease vanished).

Intervals are short (heartbeat 0.2 s, allocator 0.1 s, so the allocator lock TTL is
4 * 0.1 + 1 = 1.4 s); every timing assertion is a generous upper bound (the machine is noisy).
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import redis

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.embedded_redis import free_port
from opentinker_runtime.core.redis_store import Keys, connect
from opentinker_scheduler.clock import SystemClock
from opentinker_scheduler.leases import LeaseTable
from opentinker_scheduler.lua import Scripts
from tests._services import SERVICES, ServiceProcess, env_without_opentinker
from tests.scheduler._harness import rl_spec

T = TypeVar("T")
S = job_pb2.Job
REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEDULER = SERVICES[0]
HEARTBEAT_S = 0.2
ALLOCATOR_S = 0.1
LOCK_TTL_S = 4 * ALLOCATOR_S + 1.0  # Allocator.lock_ttl_ms
WORKER_TTL_S = 3.0
# The restart test needs a longer TTL: a worker's leases survive only if it heartbeats the new
# scheduler within the TTL, and after the old one died the worker's gRPC channel reconnects on
# gRPC's own backoff (1 s, then x1.6 with +-20% jitter: attempts ~1, 2.6, 5.2 s after the first
# failure), not on every heartbeat. 8 s covers a restart of up to ~4 s on a loaded machine.
RESTART_WORKER_TTL_S = 8.0
WAIT_S = 20.0  # generous bound for "eventually"
AUTH_DISABLED = {"OPENTINKER_AUTH": "disabled"}  # the explicit local switch (ignored until auth lands)


# --------------------------------------------------------------------------- processes


class WorkerProcess:
    """`python -m tests.scheduler._worker_process`: a WorkerAgent whose callbacks go to a file."""

    def __init__(self, *, worker_id: str, role: str, scheduler: str, cpu_devices: int,
                 directory: Path, instance: str = "") -> None:
        self.worker_id = worker_id
        self.events_path = directory / f"{worker_id}{instance}.events.jsonl"
        self.log_path = directory / f"{worker_id}{instance}.log"
        self.events_path.write_text("")
        with self.log_path.open("wb") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.scheduler._worker_process", "--scheduler", scheduler,
                 "--role", role, "--worker-id", worker_id, "--cpu-devices", str(cpu_devices),
                 "--address", f"127.0.0.1:{free_port()}", "--events", str(self.events_path)],
                cwd=REPO_ROOT, env=env_without_opentinker(**AUTH_DISABLED),
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT)

    def events(self) -> list[dict[str, Any]]:
        lines = self.events_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def assignments(self, job_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "assignment"
                and job_id in (None, e["job_id"])]

    def stops(self, job_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["event"] == "stop" and e["job_id"] == job_id]

    def registered(self) -> bool:
        return any(e["event"] == "registered" for e in self.events())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class TcpProxy:
    """A stable scheduler address (like a Service VIP): 127.0.0.1:port forwards to
    127.0.0.1:target_port. `close()` drops every connection and stops listening (connections
    are refused, as when the scheduler is gone); `open()` listens again, on the same port, to
    whatever `target_port` is then."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            _shut(listener)  # shutdown wakes the thread blocked in accept()
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            _shut(connection)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._connections += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pump(one: socket.socket, other: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([one, other], [], [], 0.5)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        raise OSError("closed")
                    (other if sock is one else one).sendall(data)
        except (OSError, ValueError):
            _shut(one)
            _shut(other)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Cluster:
    """Every process and channel a test starts; `close()` kills and closes them all."""

    def __init__(self, redis_url: str, directory: Path) -> None:
        self.redis_url = redis_url
        self.directory = directory
        self.redis = redis.Redis.from_url(redis_url)
        self.schedulers: list[ServiceProcess] = []
        self.workers: list[WorkerProcess] = []
        self.proxies: list[TcpProxy] = []
        self._channels: list[grpc.Channel] = []

    def start_scheduler(self, name: str, *, port: int | None = None,
                        worker_ttl_s: float = WORKER_TTL_S) -> ServiceProcess:
        process = ServiceProcess(
            SCHEDULER, port=port or free_port(), log_path=self.directory / f"scheduler-{name}.log",
            OPENTINKER_REDIS_URL=self.redis_url, **AUTH_DISABLED,
            OPENTINKER_SCHEDULER_HEARTBEAT_INTERVAL_SECONDS=str(HEARTBEAT_S),
            OPENTINKER_SCHEDULER_WORKER_TTL_SECONDS=str(worker_ttl_s),
            OPENTINKER_SCHEDULER_ALLOCATOR_INTERVAL_SECONDS=str(ALLOCATOR_S),
            OPENTINKER_SCHEDULER_REDIS_CHECK_SECONDS="0.5",
            OPENTINKER_SCHEDULER_GRACE_SECONDS="0.5")
        self.schedulers.append(process)
        process.wait_for_health("SERVING")
        return process

    def start_proxy(self, scheduler: ServiceProcess) -> TcpProxy:
        proxy = TcpProxy(port_of(scheduler))
        self.proxies.append(proxy)
        proxy.open()
        return proxy

    def start_worker(self, worker_id: str, role: str, scheduler: ServiceProcess | TcpProxy, *,
                     cpu_devices: int = 0, instance: str = "") -> WorkerProcess:
        """`instance` tells apart the files of a worker id started again (a restarted worker)."""
        worker = WorkerProcess(worker_id=worker_id, role=role, scheduler=scheduler.address,
                               cpu_devices=cpu_devices, directory=self.directory, instance=instance)
        self.workers.append(worker)
        return worker

    def wait_registered(self, *workers: WorkerProcess) -> None:
        self.wait_for(lambda: all(w.registered() for w in workers), "workers registered")

    def stub(self, scheduler: ServiceProcess) -> pb_grpc.SchedulerServiceStub:
        """A stub on a fresh channel (a channel to a dead address would reconnect on backoff)."""
        channel = grpc.insecure_channel(scheduler.address)
        self._channels.append(channel)
        return pb_grpc.SchedulerServiceStub(channel)

    def lock_owner(self) -> bytes | None:
        return self.redis.get(Keys().allocator_lock())

    def wait_for(self, check: Callable[[], T], what: str, *, timeout: float = WAIT_S,
                 interval: float = 0.05) -> T:
        """Poll until `check()` is truthy; fail with every process's log when it never is."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            dead = [w.worker_id for w in self.workers
                    if w.process.poll() is not None and w.process.returncode != -9]
            if dead or time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout}s: {what} (dead workers: {dead})\n"
                                     f"{self.logs()}")
            time.sleep(interval)

    def logs(self, tail: int = 3000) -> str:
        paths = [s.log_path for s in self.schedulers] + [w.log_path for w in self.workers]
        paths += [w.events_path for w in self.workers]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in paths
                         if p.exists())

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        for scheduler in self.schedulers:
            scheduler.kill()
        for proxy in self.proxies:
            proxy.close()
        for channel in self._channels:
            channel.close()
        self.redis.close()


@pytest.fixture
def cluster(redis_url: str, tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(redis_url, tmp_path)
    try:
        yield running
    finally:
        running.close()


# --------------------------------------------------------------------------- RPC helpers


def port_of(scheduler: ServiceProcess) -> int:
    return int(scheduler.address.rsplit(":", 1)[1])


def trainer_job_spec(name: str) -> job_pb2.JobSpec:
    """An RL job that needs one trainer device (plus the coordinator slot every job gets)."""
    spec = rl_spec(display_name=name)
    spec.resources.add(role=resources_pb2.ROLE_TRAINER, device_count=1)
    return spec


def submit(stub: pb_grpc.SchedulerServiceStub, request_id: str) -> pb.SubmitJobResponse:
    return stub.SubmitJob(pb.SubmitJobRequest(request_id=request_id,
                                              spec=trainer_job_spec(request_id)), timeout=10)


def get_job(stub: pb_grpc.SchedulerServiceStub, job_id: str) -> job_pb2.Job:
    return stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10).job


def in_state(stub: pb_grpc.SchedulerServiceStub, job_id: str, state: int) -> job_pb2.Job | None:
    job = get_job(stub, job_id)
    return job if job.state == state else None


def waiting(stub: pb_grpc.SchedulerServiceStub, job_id: str) -> bool:
    """QUEUED, and the allocator has looked at it (it says what the job waits for)."""
    job = get_job(stub, job_id)
    return job.state == S.STATE_QUEUED and bool(job.status_message)


def list_workers(stub: pb_grpc.SchedulerServiceStub) -> list[worker_pb2.Worker]:
    return list(stub.ListWorkers(pb.ListWorkersRequest(page_size=100), timeout=10).workers)


def watch_events(stub: pb_grpc.SchedulerServiceStub, job_id: str, *, after: int = 0,
                 through: int) -> list[job_pb2.JobEvent]:
    """WatchJob's events with sequence in (after, through]; the stream is then cancelled."""
    events: list[job_pb2.JobEvent] = []
    if through <= after:
        return events
    stream = stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_sequence=after), timeout=10)
    try:
        for response in stream:
            events.append(response.event)
            if response.event.sequence >= through:
                break
    finally:
        stream.cancel()
    return events


def all_events(stub: pb_grpc.SchedulerServiceStub, job_id: str) -> list[job_pb2.JobEvent]:
    return watch_events(stub, job_id, through=get_job(stub, job_id).last_event_sequence)


def lease_of(job: job_pb2.Job, role: int) -> resources_pb2.LeaseContext:
    return next(a.lease for a in job.assignments if a.role == role)


def normalized_workers(workers: list[worker_pb2.Worker]) -> list[worker_pb2.Worker]:
    """Workers without what heartbeats legitimately move (last heartbeat, lease expiry)."""
    result = []
    for worker in workers:
        copy = worker_pb2.Worker()
        copy.CopyFrom(worker)
        copy.ClearField("last_heartbeat_time")
        for lease in copy.leases:
            lease.ClearField("expire_time")
        result.append(copy)
    return result


def state_changes(events: list[job_pb2.JobEvent]) -> list[tuple[int, int]]:
    return [(e.state_changed.from_state, e.state_changed.to_state) for e in events
            if e.WhichOneof("payload") == "state_changed"]


# --------------------------------------------------------------------------- 1. restart


def test_sigkilled_scheduler_is_replaced_with_every_job_lease_and_event_intact(cluster: Cluster) -> None:
    """Scheduler A serves a trainer worker (1 CPU device) and a coordinator worker; job 1 RUNS,
    job 2 is QUEUED behind it. A is SIGKILLed and B started on the same port with the same
    Redis: the worker processes, which only know that address, keep heartbeating (their
    WorkerAgents retry every heartbeat interval; gRPC reconnects on its backoff) and B sees the
    same jobs, leases, fencing tokens and events. New events continue densely; the coordinator's
    lease (as its process received it) finishes job 1 through B, and B then allocates job 2.
    A SubmitJob retried with job 2's request_id after the restart returns job 2 (created=false).
    """
    port = free_port()
    scheduler_a = cluster.start_scheduler("a", port=port, worker_ttl_s=RESTART_WORKER_TTL_S)
    trainer = cluster.start_worker("trainer-1", "trainer", scheduler_a, cpu_devices=1)
    coordinator = cluster.start_worker("coord-1", "coordinator", scheduler_a)
    cluster.wait_registered(trainer, coordinator)
    a = cluster.stub(scheduler_a)

    job1_id = submit(a, "job-1").job.job_id
    cluster.wait_for(lambda: in_state(a, job1_id, S.STATE_RUNNING), "job 1 RUNNING")
    created = submit(a, "job-2")
    assert created.created
    job2_id = created.job.job_id
    cluster.wait_for(lambda: waiting(a, job2_id), "job 2 waits for the trainer device")
    cluster.wait_for(lambda: trainer.assignments(job1_id) and coordinator.assignments(job1_id),
                     "both worker processes got job 1's assignment")

    job1_before, job2_before = get_job(a, job1_id), get_job(a, job2_id)
    workers_before = list_workers(a)
    events1_before, events2_before = all_events(a, job1_id), all_events(a, job2_id)
    assert job1_before.state == S.STATE_RUNNING and job2_before.state == S.STATE_QUEUED
    assert {x.lease.lease_id for x in job1_before.assignments} == \
        {lease.lease_id for w in workers_before for lease in w.leases}
    assert [e.sequence for e in events1_before] == list(range(1, job1_before.last_event_sequence + 1))
    assert [e.sequence for e in events2_before] == list(range(1, job2_before.last_event_sequence + 1))
    assert state_changes(events1_before)[-1] == (S.STATE_ALLOCATING, S.STATE_RUNNING)

    scheduler_a.kill()  # SIGKILL: no graceful shutdown, nothing flushed
    killed_at = time.monotonic()
    scheduler_b = cluster.start_scheduler("b", port=port, worker_ttl_s=RESTART_WORKER_TTL_S)
    restart_s = time.monotonic() - killed_at
    b = cluster.stub(scheduler_b)

    # every worker heartbeats B again (a heartbeat renews lease expiry) within the TTL
    def heartbeat_after_restart() -> bool:
        return all(w.last_heartbeat_time.ToMilliseconds() > time.time() * 1000 - 2 * HEARTBEAT_S * 1000
                   for w in list_workers(b))
    cluster.wait_for(heartbeat_after_restart, "workers heartbeat the restarted scheduler",
                     timeout=RESTART_WORKER_TTL_S)

    assert get_job(b, job1_id) == job1_before  # RUNNING, same assignments, lease ids, tokens
    assert get_job(b, job2_id) == job2_before  # still QUEUED, same status
    assert normalized_workers(list_workers(b)) == normalized_workers(workers_before)
    assert all(w.state == worker_pb2.Worker.STATE_ALIVE for w in list_workers(b))
    assert all_events(b, job1_id) == events1_before
    assert all_events(b, job2_id) == events2_before
    # the worker processes saw one assignment per lease and no stop across the restart
    for worker in (trainer, coordinator):
        assert len(worker.assignments()) == 1 and not worker.stops(job1_id), worker.events()
    coord_lease = lease_of(job1_before, resources_pb2.ROLE_COORDINATOR)
    seen = coordinator.assignments(job1_id)[0]
    assert (seen["lease_id"], seen["fencing_token"]) == (coord_lease.lease_id, coord_lease.fencing_token)

    retried = submit(b, "job-2")  # the same request_id after the restart
    assert (retried.job.job_id, retried.created) == (job2_id, False)

    # new events continue densely after the recorded ones
    reported = b.ReportJobEvents(pb.ReportJobEventsRequest(
        lease=coord_lease, request_id="after-restart",
        events=[job_pb2.JobEvent(log=job_pb2.LogLine(level=job_pb2.LogLine.LEVEL_INFO,
                                                     source="coordinator",
                                                     message="still here after the restart"))]),
        timeout=10)
    assert reported.last_sequence == job1_before.last_event_sequence + 1
    finished = b.FinishJob(pb.FinishJobRequest(lease=coord_lease, final_state=S.STATE_SUCCEEDED,
                                               request_id="finish-1"), timeout=10).job
    assert finished.state == S.STATE_SUCCEEDED
    events1_after = all_events(b, job1_id)
    assert events1_after[:len(events1_before)] == events1_before
    assert [e.sequence for e in events1_after] == list(range(1, finished.last_event_sequence + 1))
    assert events1_after[len(events1_before)].log.message == "still here after the restart"
    assert state_changes(events1_after)[-1] == (S.STATE_RUNNING, S.STATE_SUCCEEDED)

    # B (once A's allocator lock expired) allocates job 2 on the freed device
    job2 = cluster.wait_for(lambda: in_state(b, job2_id, S.STATE_RUNNING), "job 2 RUNNING on B")
    trainer_assignment = next(x for x in job2.assignments if x.role == resources_pb2.ROLE_TRAINER)
    assert list(trainer_assignment.device_ids) == ["cpu:0"]
    assert trainer_assignment.lease.fencing_token > max(
        x.lease.fencing_token for x in job1_before.assignments)
    cluster.wait_for(lambda: trainer.stops(job1_id) and coordinator.stops(job1_id)
                     and trainer.assignments(job2_id), "workers stop job 1 and start job 2")
    events2_after = all_events(b, job2_id)
    assert events2_after[:len(events2_before)] == events2_before
    assert [e.sequence for e in events2_after] == list(range(1, len(events2_after) + 1))
    print(f"restart took {restart_s:.2f}s")


OUTAGE_TTL_S = 4.5  # gRPC's default backoff would reconnect only ~5.2 s after the first failure
OUTAGE_S = 3.0  # past gRPC's default 2nd attempt (~2.6 s); capped at 0.5 s, we are back by ~3.6 s


class LeasesLost(AssertionError):
    """The leases of a job did not survive an outage shorter than the worker TTL."""


def test_leases_survive_a_restart_whose_outage_is_shorter_than_the_worker_ttl(cluster: Cluster) -> None:
    """Like the restart test, with the outage made exact: the workers reach the scheduler through
    a TCP proxy (the scheduler's stable address, as a Service VIP or DNS name would be). The proxy
    stops listening and scheduler A is SIGKILLed; B starts on another port; the proxy listens
    again, forwarding to B, 3.0 s after it stopped: shorter than the 4.5 s worker TTL, so every
    lease must survive. With gRPC's default reconnect backoff the workers' first heartbeat came
    at the 3rd reconnect attempt (~5.2 s), past the TTL, and job 1 was interrupted."""
    scheduler_a = cluster.start_scheduler("a", worker_ttl_s=OUTAGE_TTL_S)
    proxy = cluster.start_proxy(scheduler_a)
    trainer = cluster.start_worker("trainer-1", "trainer", proxy, cpu_devices=1)
    coordinator = cluster.start_worker("coord-1", "coordinator", proxy)
    cluster.wait_registered(trainer, coordinator)
    a = cluster.stub(scheduler_a)
    job_id = submit(a, "job-1").job.job_id
    cluster.wait_for(lambda: trainer.assignments(job_id) and coordinator.assignments(job_id),
                     "both worker processes got job 1's assignment")
    before = get_job(a, job_id)
    assert before.state == S.STATE_RUNNING

    proxy.close()  # from here on the scheduler's address refuses connections
    went_away = time.monotonic()
    scheduler_a.kill()
    scheduler_b = cluster.start_scheduler("b", worker_ttl_s=OUTAGE_TTL_S)
    proxy.target_port = port_of(scheduler_b)
    time.sleep(max(0.0, went_away + OUTAGE_S - time.monotonic()))
    proxy.open()
    back_at_ms = time.time() * 1000
    outage_s = time.monotonic() - went_away
    if outage_s >= OUTAGE_TTL_S - 0.2:
        pytest.skip(f"the machine was too slow: the outage took {outage_s:.2f}s, not shorter "
                    f"than the {OUTAGE_TTL_S}s TTL")
    b = cluster.stub(scheduler_b)

    def every_worker_back() -> bool:
        workers = list_workers(b)
        return len(workers) == 2 and all(
            w.last_heartbeat_time.ToMilliseconds() > back_at_ms for w in workers)
    cluster.wait_for(every_worker_back, "workers heartbeat (or register with) the new scheduler")
    after = get_job(b, job_id)
    if after != before:
        raise LeasesLost(f"outage {outage_s:.2f}s < TTL {OUTAGE_TTL_S}s, yet job 1 is "
                         f"{S.State.Name(after.state)} (attempt {after.attempt}, "
                         f"{after.retries_left} retries left): {after.status_message}")


# --------------------------------------------------------------------------- 2. two replicas


class LeaseMonitor:
    """Polls ListWorkers in a thread; records every moment a device had two unexpired leases.

    ListWorkers reads each worker's lease set with one SMEMBERS (lease acquire and release are
    atomic Lua scripts), and an expired lease cannot be renewed: two leases of one snapshot that
    both expire after the time the snapshot began were both valid at that time."""

    def __init__(self, stub: pb_grpc.SchedulerServiceStub) -> None:
        self.stub = stub
        self.snapshots = 0
        self.violations: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LeaseMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            began_ms = int(time.time() * 1000)
            try:
                workers = list_workers(self.stub)
            except grpc.RpcError as error:
                self.errors.append(f"{error.code().name}: {error.details()}")
                self._stop.wait(0.1)
                continue
            self.snapshots += 1
            for worker in workers:
                holders: dict[str, list[str]] = {}
                for lease in worker.leases:
                    if lease.expire_time.ToMilliseconds() > began_ms:
                        for device_id in lease.device_ids:
                            holders.setdefault(device_id, []).append(lease.job_id)
                self.violations += [f"{worker.worker_id}/{device}: {jobs}"
                                    for device, jobs in holders.items() if len(jobs) > 1]
            self._stop.wait(0.03)


def test_two_replicas_share_redis_and_the_allocator_fails_over_when_the_lock_holder_dies(
        cluster: Cluster) -> None:
    """Replicas A and B run at once on two ports with one Redis. A starts first and takes the
    allocator lock; B then starts and both serve every RPC (a job submitted on one is seen on the
    other). The worker processes heartbeat B, the replica that survives: workers are pool state
    in Redis, so A allocates to them all the same, and pointing them at the survivor keeps the
    test about allocator failover (a WorkerAgent knows one scheduler address; clients fail over
    by address, e.g. behind a load balancer, which is not what is tested here). While both run,
    the lock never leaves A. A is SIGKILLed holding the lock; B takes the lock once its TTL
    (1.4 s) ran out and allocates newly submitted jobs, and never before that. A thread polls
    ListWorkers all along: no device is ever held by two unexpired leases.
    """
    lock_key = Keys().allocator_lock()
    scheduler_a = cluster.start_scheduler("a")
    owner_a = cluster.wait_for(cluster.lock_owner, "replica A holds the allocator lock")
    scheduler_b = cluster.start_scheduler("b")
    a, b = cluster.stub(scheduler_a), cluster.stub(scheduler_b)
    trainer = cluster.start_worker("trainer-1", "trainer", scheduler_b, cpu_devices=3)
    coordinator = cluster.start_worker("coord-1", "coordinator", scheduler_b)
    cluster.wait_registered(trainer, coordinator)
    assert [w.worker_id for w in list_workers(a)] == [w.worker_id for w in list_workers(b)] \
        == ["coord-1", "trainer-1"]

    with LeaseMonitor(cluster.stub(scheduler_b)) as monitor:
        job1 = submit(a, "job-1").job  # submitted on A ...
        assert get_job(b, job1.job_id).job_id == job1.job_id  # ... seen on B
        job2 = submit(b, "job-2").job  # and the other way round
        assert get_job(a, job2.job_id).spec.display_name == "job-2"
        for job_id in (job1.job_id, job2.job_id):
            cluster.wait_for(lambda job_id=job_id: in_state(b, job_id, S.STATE_RUNNING),
                             f"{job_id} RUNNING (allocated by A)")
        assert all_events(a, job1.job_id) == all_events(b, job1.job_id)
        owners = set()
        for _ in range(20):  # both replicas' allocators run: the lock stays A's
            owners.add(cluster.lock_owner())
            time.sleep(0.05)
        assert owners == {owner_a}
        assert 0 < cluster.redis.pttl(lock_key) <= LOCK_TTL_S * 1000

        scheduler_a.kill()
        killed_at = time.monotonic()
        job3 = submit(b, "job-3").job

        def job3_running() -> job_pb2.Job | None:
            owner = cluster.lock_owner()
            job = get_job(b, job3.job_id)
            if job.state != S.STATE_QUEUED:
                assert owner != owner_a, "job 3 was allocated while the dead A still held the lock"
            return job if job.state == S.STATE_RUNNING else None
        job3 = cluster.wait_for(job3_running, "replica B allocates job 3 after A died")
        failover_s = time.monotonic() - killed_at
        owner_b = cluster.lock_owner()
        assert owner_b not in (None, owner_a)
        assert failover_s < LOCK_TTL_S + 10.0  # "within roughly the lock TTL", machine noise aside

        # B keeps allocating: job 4 waits for a device, gets job 1's once job 1 finishes
        job4 = submit(b, "job-4").job
        cluster.wait_for(lambda: waiting(b, job4.job_id), "job 4 waits for a trainer device")
        b.FinishJob(pb.FinishJobRequest(lease=lease_of(get_job(b, job1.job_id),
                                                       resources_pb2.ROLE_COORDINATOR),
                                        final_state=S.STATE_SUCCEEDED), timeout=10)
        cluster.wait_for(lambda: in_state(b, job4.job_id, S.STATE_RUNNING), "job 4 RUNNING on B")
        time.sleep(3 * HEARTBEAT_S)  # a few more snapshots after the last change
    assert cluster.lock_owner() == owner_b

    assert monitor.snapshots > 10, monitor.errors
    assert not monitor.violations, monitor.violations
    running = [get_job(b, job_id) for job_id in (job2.job_id, job3.job_id, job4.job_id)]
    assert all(job.state == S.STATE_RUNNING for job in running)
    devices = [(x.worker_id, d) for job in running for x in job.assignments for d in x.device_ids]
    assert sorted(devices) == [("trainer-1", "cpu:0"), ("trainer-1", "cpu:1"), ("trainer-1", "cpu:2")]
    tokens = [x.lease.fencing_token for job in running for x in job.assignments]
    assert len(tokens) == len(set(tokens))
    print(f"allocator failover took {failover_s:.2f}s (lock TTL {LOCK_TTL_S}s)")


class ZombieJob(AssertionError):
    """A job stayed RUNNING on a lease that no longer exists."""


def release_lease_as_the_scheduler_would(redis_url: str, lease_id: str) -> None:
    """The first of the two steps of WorkerPool._drop_leases / Allocator.expire_leases: the
    scheduler's own LeaseTable.release, run against the shared Redis."""
    async def release() -> None:
        client = connect(redis_url)
        try:
            table = LeaseTable(client=client, keys=Keys(), scripts=Scripts.register(client),
                               clock=SystemClock())
            assert await table.release(lease_id) is not None
        finally:
            await client.aclose()
    asyncio.run(release())


def test_a_scheduler_killed_between_releasing_a_lease_and_requeueing_its_job(cluster: Cluster) -> None:
    """"kill -9 the scheduler at any moment". Replicas A (the allocator) and B run; the workers
    heartbeat B. Job 1 RUNS on the trainer (1 CPU device) and the coordinator; job 2 is QUEUED.
    The coordinator process restarts: its new registration makes a scheduler drop the old
    registration's leases, i.e. release each lease, then re-queue its job. A SIGKILL of that
    scheduler between the two steps is reproduced exactly (a random kill rarely lands in a
    window of a few Redis round trips): A is SIGKILLed, the test runs the first step (the
    scheduler's LeaseTable.release of the coordinator lease), and the coordinator process starts
    again (same worker id) and registers with B. B holds every piece of state, so within the
    worker TTL plus the allocator lock TTL (and a margin) job 1 should no longer be RUNNING on a
    lease that is gone: re-queued (then started again) or ended, freeing the trainer device for
    job 2 if it is not restarted. (It once stayed RUNNING forever, holding the trainer device.)"""
    scheduler_a = cluster.start_scheduler("a")
    cluster.wait_for(cluster.lock_owner, "replica A holds the allocator lock")
    scheduler_b = cluster.start_scheduler("b")
    b = cluster.stub(scheduler_b)
    trainer = cluster.start_worker("trainer-1", "trainer", scheduler_b, cpu_devices=1)
    coordinator = cluster.start_worker("coord-1", "coordinator", scheduler_b)
    cluster.wait_registered(trainer, coordinator)
    job1_id = submit(b, "job-1").job.job_id
    job1 = cluster.wait_for(lambda: in_state(b, job1_id, S.STATE_RUNNING), "job 1 RUNNING")
    job2_id = submit(b, "job-2").job.job_id
    cluster.wait_for(lambda: waiting(b, job2_id), "job 2 waits for the trainer device")
    coord_lease = lease_of(job1, resources_pb2.ROLE_COORDINATOR)

    coordinator.kill()  # the coordinator process restarts ...
    scheduler_a.kill()  # ... and the scheduler handling it dies between the two steps
    release_lease_as_the_scheduler_would(cluster.redis_url, coord_lease.lease_id)
    killed_at = time.monotonic()
    restarted = cluster.start_worker("coord-1", "coordinator", scheduler_b, instance="-restarted")
    cluster.wait_registered(restarted)

    def leases_now() -> set[str]:
        return {lease.lease_id for w in list_workers(b) for lease in w.leases}

    def job1_handled() -> bool:
        job = get_job(b, job1_id)
        return (job.state != S.STATE_RUNNING
                or {x.lease.lease_id for x in job.assignments} <= leases_now())
    bound_s = WORKER_TTL_S + LOCK_TTL_S + 3.0
    deadline = time.monotonic() + bound_s
    while not job1_handled():
        if time.monotonic() > deadline:
            job, job2 = get_job(b, job1_id), get_job(b, job2_id)
            raise ZombieJob(
                f"{time.monotonic() - killed_at:.1f}s after the crash job 1 is still "
                f"{S.State.Name(job.state)} on coordinator lease {coord_lease.lease_id}, which "
                f"no longer exists; job 2 is {S.State.Name(job2.state)}: {job2.status_message}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- 3. cancel


def test_cancel_stops_the_job_on_every_worker_process_and_frees_its_devices(cluster: Cluster) -> None:
    """Job 1 RUNS on a trainer worker process (1 CPU device) and a coordinator worker process;
    job 2 is QUEUED behind it. CancelJob: both processes' on_stop fires for job 1 (they learn it
    from a heartbeat's stop_job_ids), job 1 ends CANCELLED with no lease left, and job 2 gets
    the freed device, all within seconds."""
    scheduler = cluster.start_scheduler("s")
    trainer = cluster.start_worker("trainer-1", "trainer", scheduler, cpu_devices=1)
    coordinator = cluster.start_worker("coord-1", "coordinator", scheduler)
    cluster.wait_registered(trainer, coordinator)
    stub = cluster.stub(scheduler)

    job1_id = submit(stub, "job-1").job.job_id
    cluster.wait_for(lambda: trainer.assignments(job1_id) and coordinator.assignments(job1_id),
                     "both worker processes got job 1's assignment")
    job2_id = submit(stub, "job-2").job.job_id
    cluster.wait_for(lambda: waiting(stub, job2_id), "job 2 waits for the trainer device")

    cancelled_at = time.monotonic()
    response = stub.CancelJob(pb.CancelJobRequest(job_id=job1_id, reason="user changed their mind"),
                              timeout=10).job
    assert response.cancel_requested or response.state == S.STATE_CANCELLED
    cluster.wait_for(lambda: trainer.stops(job1_id) and coordinator.stops(job1_id),
                     "every worker process ran on_stop for job 1")
    stopped_s = time.monotonic() - cancelled_at
    job1 = cluster.wait_for(lambda: in_state(stub, job1_id, S.STATE_CANCELLED), "job 1 CANCELLED")
    job2 = cluster.wait_for(lambda: in_state(stub, job2_id, S.STATE_RUNNING), "job 2 gets the device")
    freed_s = time.monotonic() - cancelled_at
    assert stopped_s < 10.0 and freed_s < 10.0  # "within seconds", generously

    assert not [lease for w in list_workers(stub) for lease in w.leases if lease.job_id == job1_id]
    assert job1.HasField("end_time")
    assert state_changes(all_events(stub, job1_id))[-1] == (S.STATE_RUNNING, S.STATE_CANCELLED)
    trainer_assignment = next(x for x in job2.assignments if x.role == resources_pb2.ROLE_TRAINER)
    assert list(trainer_assignment.device_ids) == ["cpu:0"]
    cluster.wait_for(lambda: trainer.assignments(job2_id), "the trainer process starts job 2")
    for worker in (trainer, coordinator):
        assert len(worker.stops(job1_id)) == 1, worker.events()  # told once
    again = stub.CancelJob(pb.CancelJobRequest(job_id=job1_id), timeout=10).job
    assert again.state == S.STATE_CANCELLED  # cancelling twice is a no-op
    print(f"cancel: workers stopped after {stopped_s:.2f}s, device reused after {freed_s:.2f}s")
