"""The open sessions of this Trainer, and the rules every call goes through.

Per session one asyncio lock serialises calls; the torch work runs in a worker thread so the
event loop stays responsive, and the lock is held until that thread finishes even when the
caller gives up. Per job the highest fencing token seen is kept: a lower one is refused
(the edge's FencingGuard: StaleFencingToken). A request_id makes a call apply once: its result is remembered (per
session, per kind of call) and a retry gets the same result; the same id with a different
request is refused (RequestIdReusedError).

No session outlives its attempt: a session of a job whose newer attempt (higher fencing token)
opens a session here or is assigned this worker is closed, so is every session of a job the
Scheduler stopped or moved away (`job_stopped`), and `reap_idle` closes sessions without calls
for `idle_ttl_s`, except those of an attempt the Scheduler has assigned this worker (its lease,
not a clock, says when they end: an RL step's rollouts may keep the Trainer idle for long). Closing frees the model and optimizer (and stops data-parallel replicas); a
later call on the session is SessionNotFoundError saying why it was closed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from opentinker_runtime.edge.lease import FencingGuard, LeaseContext
from opentinker_runtime.workers.devices import ResidentModel, group_resident
from opentinker_trainer.metrics import ACTIVE_SESSIONS
from opentinker_trainer.batching import Datum
from opentinker_trainer.config import LossConfig, SessionSpec
from opentinker_trainer.collectives import DEFAULT_COLLECTIVE_TIMEOUT_S
from opentinker_trainer.cycle_queue import DEFAULT_GATHER_S, CycleQueue
from opentinker_trainer.errors import RequestIdReusedError, SessionNotFoundError, ValidationError
from opentinker_trainer.session import SessionView, TrainingSession
from opentinker_trainer.remote_replicas import ReplicaHost, ReplicaPeer
from opentinker_trainer.replicas import RemoteRanks, ReplicaInvite
from opentinker_trainer.session_factory import create_session
from opentinker_trainer.shared_base import SharedBases
from opentinker_trainer.training import ForwardBackwardResult

log = structlog.get_logger(__name__)

T = TypeVar("T")
REMEMBERED_REQUESTS = 32  # per session; results may hold a whole batch of logprobs
REMEMBERED_CLOSES = 1024  # why a session was closed, for the NOT_FOUND of a late call
DEFAULT_IDLE_TTL_S = 1800.0


@dataclass(frozen=True, kw_only=True)
class RequestKey:
    """A call's request_id and a fingerprint of its content (e.g. a hash of the request)."""

    kind: str
    request_id: str
    fingerprint: str = ""


class RequestMemory:
    """The latest results by request key, bounded (oldest forgotten first)."""

    def __init__(self, capacity: int = REMEMBERED_REQUESTS) -> None:
        self.capacity = capacity
        self._results: OrderedDict[tuple[str, str], tuple[str, Any]] = OrderedDict()

    def lookup(self, key: RequestKey | None) -> tuple[bool, Any]:
        """(True, result) when `key` was seen; RequestIdReusedError on a different fingerprint."""
        if key is None or not key.request_id or (key.kind, key.request_id) not in self._results:
            return False, None
        fingerprint, result = self._results[(key.kind, key.request_id)]
        if fingerprint != key.fingerprint:
            raise RequestIdReusedError(f"request_id {key.request_id!r} was already used for a "
                                       f"different {key.kind} request")
        return True, result

    def remember(self, key: RequestKey | None, result: Any) -> None:
        if key is None or not key.request_id:
            return
        self._results[(key.kind, key.request_id)] = (key.fingerprint, result)
        while len(self._results) > self.capacity:
            self._results.popitem(last=False)


class _Entry:
    """A session plus what the registry keeps for it: the fencing token of the attempt that
    opened it, when it was last used, and whether it is closed."""

    def __init__(self, session: TrainingSession, *, fencing_token: int, now: float) -> None:
        self.session = session
        self.fencing_token = fencing_token
        self.last_used = now
        self.closed = False
        self.lock = asyncio.Lock()
        self.requests = RequestMemory()

    @property
    def job_id(self) -> str:
        return self.session.spec.job_id


StartPeer = Callable[[ReplicaPeer, ReplicaInvite, str, str], Awaitable[None]]
"""Asks a peer Trainer to start its ranks (peer, invite, job token, session id): `PeerClient.start`."""
START_PEER_TIMEOUT_S = 90.0


class SessionRegistry:
    """Sessions keyed by session_id; fencing tokens keyed by job_id (`fencing`); the ranks this
    worker runs for data-parallel sessions whose rank 0 is on another Trainer (`replica_host`)."""

    def __init__(self, *, checkpoint_root: Path, device: str = "cpu",
                 device_ids: tuple[str, ...] = ("cpu:0",), idle_ttl_s: float = DEFAULT_IDLE_TTL_S,
                 clock: Callable[[], float] = time.monotonic, share_lora_base: bool = True,
                 cycle_gather_s: float = DEFAULT_GATHER_S, host: str = "127.0.0.1",
                 start_peer: StartPeer | None = None,
                 collective_timeout_s: float = DEFAULT_COLLECTIVE_TIMEOUT_S) -> None:
        """`share_lora_base`: LoRA sessions of one base model stand on one frozen copy of it
        (`shared_base`) and their ForwardBackward calls run in cycles (`cycle_queue`), which wait
        up to `cycle_gather_s` for the base's other sessions; False: every session loads its own.
        `host`: this worker's reachable address (a data-parallel group across hosts meets
        there); `start_peer`: how to ask another Trainer for its ranks (None: sessions with
        peers are refused); `collective_timeout_s`: how long a data-parallel rank waits in a
        collective."""
        self.checkpoint_root = Path(checkpoint_root)
        self.bases = SharedBases() if share_lora_base else None
        self.cycles = CycleQueue(_in_thread, self.bases.holders, gather_s=cycle_gather_s) if self.bases else None
        self.device = device
        self.device_ids = device_ids
        self.idle_ttl_s = idle_ttl_s
        self.clock = clock
        self._entries: dict[str, _Entry] = {}
        self.fencing = FencingGuard(worker="trainer")
        self._create_lock = asyncio.Lock()
        self._created = RequestMemory()
        self._closed: OrderedDict[str, str] = OrderedDict()
        self.host = host
        self.start_peer = start_peer
        self.collective_timeout_s = collective_timeout_s
        self.replica_host = ReplicaHost(checkpoint_root=self.checkpoint_root, device=device, host=host,
                                        timeout_s=collective_timeout_s)

    async def create(self, spec: SessionSpec, *, lease: LeaseContext, device_ids: Sequence[str] = (),
                     request: RequestKey | None = None, peers: Sequence[ReplicaPeer] = (),
                     job_token: str = "") -> SessionView:
        """Open a session on `device_ids` (default: the first device; several = data-parallel),
        and on `peers`' devices (other Trainers of the job's lease, which start those ranks when
        asked with the job's token).

        A retried request_id returns the session it created.
        """
        self.fencing.check(lease)
        devices = self.session_devices(device_ids)
        new_id = f"sess-{uuid.uuid4().hex[:12]}"
        remote = self._remote_ranks(peers, lease, job_token, new_id) if peers else None
        await self.close_older_attempts(lease.job_id, lease.fencing_token)  # free memory first
        async with self._create_lock:
            seen, session_id = self._created.lookup(request)
            if seen and session_id in self._entries:
                return self._entries[session_id].session.view()
            session = await _in_thread(lambda: create_session(
                new_id, spec, checkpoint_root=self.checkpoint_root,
                device=self.device, device_ids=devices, bases=self.bases, remote=remote,
                collective_timeout_s=self.collective_timeout_s))
            self._entries[session.session_id] = _Entry(session, fencing_token=lease.fencing_token,
                                                       now=self.clock())
            ACTIVE_SESSIONS.inc()
            self._created.remember(request, session.session_id)
            return session.view()

    def _remote_ranks(self, peers: Sequence[ReplicaPeer], lease: LeaseContext, job_token: str,
                      session_id: str) -> RemoteRanks:
        if self.start_peer is None:
            raise ValidationError("peers", "this trainer cannot start data-parallel ranks on other workers")
        for index, peer in enumerate(peers):
            if not peer.address or not peer.device_ids:
                raise ValidationError(f"peers[{index}]", "needs an address and device_ids")
            if peer.lease.job_id != lease.job_id:
                raise ValidationError(f"peers[{index}].lease.job_id", f"{peer.lease.job_id!r} is not the "
                                      f"session's job ({lease.job_id!r})")
        start_peer, loop = self.start_peer, asyncio.get_running_loop()

        def start(peer: ReplicaPeer, invite: ReplicaInvite) -> None:  # from the creating thread
            future = asyncio.run_coroutine_threadsafe(start_peer(peer, invite, job_token, session_id), loop)
            future.result(timeout=START_PEER_TIMEOUT_S)

        return RemoteRanks(host=self.host, peers=tuple(peers), start=start)

    async def start_replicas(self, lease: LeaseContext, invite: ReplicaInvite, device_ids: Sequence[str]) -> int:
        """Start ranks of another Trainer's data-parallel session of the job on `device_ids`
        (devices of this worker, held by the job's `lease` here); how many."""
        self.fencing.check(lease)
        if not lease.job_id:
            raise ValidationError("lease.job_id", "is required: replicas serve a job's lease")
        if not device_ids:
            raise ValidationError("device_ids", "is required")
        devices = self.session_devices(device_ids)
        if not 0 < invite.first_rank < invite.world_size or invite.first_rank + len(devices) > invite.world_size:
            raise ValidationError("first_rank", f"ranks {invite.first_rank}..{invite.first_rank + len(devices) - 1} "
                                  f"do not fit a group of {invite.world_size}")
        # not on the torch thread: this Trainer's own data-parallel session may be waiting there
        # for a peer's ranks (and in a test both Trainers share a process)
        return await asyncio.to_thread(self.replica_host.start, lease.job_id, invite, devices)

    def resident_models(self) -> list[ResidentModel]:
        """The shared bases held now: per device and model, the jobs whose sessions stand on it."""
        return group_resident((entry.session.device_ids[0], entry.session.spec.base.model_key, entry.job_id)
                              for entry in list(self._entries.values()) if entry.session.base is not None)

    def session_devices(self, device_ids: Sequence[str]) -> tuple[str, ...]:
        """The devices a session asks for, checked against those this worker offers."""
        if not device_ids:
            return self.device_ids[:1]
        unknown = [d for d in device_ids if d not in self.device_ids]
        if unknown:
            raise ValidationError("device_ids", f"{unknown} are not devices of this worker; it "
                                  f"offers {list(self.device_ids)}")
        if len(set(device_ids)) != len(device_ids):
            raise ValidationError("device_ids", f"lists a device twice: {list(device_ids)}")
        return tuple(device_ids)

    def view(self, session_id: str) -> SessionView:
        return self._entry(session_id).session.view()

    async def run(self, session_id: str, lease: LeaseContext | None, work: Callable[[TrainingSession], T],
                  *, request: RequestKey | None = None) -> T:
        """Run `work(session)` in a thread under the session's lock, after the lease checks."""
        entry = self._entry(session_id)
        async with entry.lock:
            self._require_open(entry)
            if lease is not None:
                self.check_lease(entry.session, lease)
            try:
                return await _in_thread(lambda: self._once(entry, work, request))
            finally:
                entry.last_used = self.clock()

    async def forward_backward(self, session_id: str, lease: LeaseContext | None, datums: Sequence[Datum],
                               loss: LossConfig, *, request: RequestKey | None = None) -> ForwardBackwardResult:
        """`run` of the session's forward_backward; a session on a shared base joins its base's
        next cycle (`cycle_queue`)."""
        entry = self._entry(session_id)
        session = entry.session
        if self.cycles is None or session.base is None:
            return await self.run(session_id, lease, lambda s: s.forward_backward(datums, loss), request=request)
        async with entry.lock:
            self._require_open(entry)
            if lease is not None:
                self.check_lease(session, lease)
            try:
                seen, result = entry.requests.lookup(request)
                if not seen:
                    result = await self.cycles.forward_backward(session, datums, loss)
                    entry.requests.remember(request, result)
                return result
            finally:
                entry.last_used = self.clock()

    async def close(self, session_id: str, lease: LeaseContext) -> SessionView:
        """Remove the session (after any call in flight) and report its final state."""
        entry = self._entry(session_id)
        async with entry.lock:
            self._require_open(entry)
            self.check_lease(entry.session, lease)
            await self._release(entry, "its client closed it (CloseSession)")
            return entry.session.view()

    async def close_all(self) -> None:
        """Close every session (server shutdown)."""
        for session_id in list(self._entries):
            await self._close_entry(self._entries[session_id], "the trainer shut down")
        await asyncio.to_thread(self.replica_host.close_all)

    async def close_older_attempts(self, job_id: str, fencing_token: int) -> list[str]:
        """Close the sessions of `job_id` opened by an attempt older than `fencing_token`."""
        stale = [entry for entry in self._entries.values()
                 if job_id and entry.job_id == job_id and entry.fencing_token < fencing_token]
        for entry in stale:
            await self._close_entry(entry, f"a newer attempt of job {job_id!r} (fencing token "
                                           f"{fencing_token}) replaced the one that opened it "
                                           f"(fencing token {entry.fencing_token})")
        return [entry.session.session_id for entry in stale]

    async def attempt_assigned(self, job_id: str, fencing_token: int) -> None:
        """The Scheduler assigned this worker an attempt of `job_id`: its token becomes the
        job's floor, and older attempts' sessions are closed."""
        if not job_id:
            return
        self.fencing.attempt_assigned(job_id, fencing_token)
        await self.close_older_attempts(job_id, fencing_token)

    async def job_stopped(self, job_id: str) -> list[str]:
        """The Scheduler no longer runs `job_id` here (cancelled, ended, or its lease moved to
        another worker; a WorkerAgent callback): close its sessions."""
        self.fencing.job_stopped(job_id)
        if job_id:
            await asyncio.to_thread(self.replica_host.stop_job, job_id)
        ended = [entry for entry in self._entries.values() if job_id and entry.job_id == job_id]
        for entry in ended:
            await self._close_entry(entry, f"the scheduler no longer runs job {job_id!r} on this trainer")
        return [entry.session.session_id for entry in ended]

    async def reap_idle(self) -> list[str]:
        """Close the sessions without calls for `idle_ttl_s` (not those in a call, nor those of
        an attempt assigned this worker); their ids."""
        cutoff = self.clock() - self.idle_ttl_s
        idle = [entry for entry in self._entries.values()
                if entry.last_used < cutoff and not entry.lock.locked() and not self._lease_holds(entry)]
        for entry in idle:
            await self._close_entry(entry, f"it had no calls for {self.idle_ttl_s:g} s (the "
                                           "trainer's session_idle_ttl_seconds)")
        return [entry.session.session_id for entry in idle]

    def check_lease(self, session: TrainingSession, lease: LeaseContext) -> None:
        """The lease must belong to the session's job and carry a current fencing token."""
        if session.spec.job_id and lease.job_id != session.spec.job_id:
            raise ValidationError("lease.job_id", f"{lease.job_id!r} is not the job of session "
                                  f"{session.session_id} ({session.spec.job_id!r})")
        self.fencing.check(lease)

    def _entry(self, session_id: str) -> _Entry:
        if not session_id:
            raise ValidationError("session_id", "is required")
        entry = self._entries.get(session_id)
        if entry is None:
            raise SessionNotFoundError(session_id, closed_because=self._closed.get(session_id, ""))
        entry.last_used = self.clock()
        return entry

    def _lease_holds(self, entry: _Entry) -> bool:
        """Whether the session belongs to the attempt of its job the Scheduler assigned us."""
        return self.fencing.holds(entry.job_id, entry.fencing_token)

    def _require_open(self, entry: _Entry) -> None:
        """A call that waited for the lock of a session closed meanwhile fails."""
        if entry.closed:
            session_id = entry.session.session_id
            raise SessionNotFoundError(session_id, closed_because=self._closed.get(session_id, "another call closed it"))

    async def _close_entry(self, entry: _Entry, why: str) -> None:
        """Close `entry` for `why` once the call it runs (if any) ends; a data-parallel call
        waiting on its replicas is cut short (a replica host may be unreachable for good)."""
        if entry.lock.locked() and entry.session.replicas is not None:
            entry.session.replicas.abort()
        async with entry.lock:
            if not entry.closed:
                await self._release(entry, why)

    async def _release(self, entry: _Entry, why: str) -> None:
        """Forget the session (a later call learns `why`) and free what it holds; under its lock."""
        session_id = entry.session.session_id
        entry.closed = True
        if self._entries.pop(session_id, None) is not None:
            ACTIVE_SESSIONS.dec()
        self._closed[session_id] = why
        while len(self._closed) > REMEMBERED_CLOSES:
            self._closed.popitem(last=False)
        entry.requests = RequestMemory()
        await _in_thread(entry.session.close)
        log.info("session_released", session_id=session_id, job_id=entry.job_id[:128], why=why)

    @staticmethod
    def _once(entry: _Entry, work: Callable[[TrainingSession], T], request: RequestKey | None) -> T:
        seen, result = entry.requests.lookup(request)
        if seen:
            return result
        result = work(entry.session)
        entry.requests.remember(request, result)
        return result


_TORCH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trainer-torch")
"""The one thread that runs every session's torch work. torch keeps an intra-op pool per
calling thread: hopping between `asyncio.to_thread`'s threads left a pool per hop spinning
against the busy one. Sessions' steps compete for the same cores anyway."""


async def _in_thread(function: Callable[[], T]) -> T:
    """Run `function` on the torch thread; if the caller is cancelled, still wait for the
    thread to finish before returning control (so a lock held around this stays held)."""
    future = asyncio.get_running_loop().run_in_executor(_TORCH_THREAD, function)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await asyncio.wait({future})
        raise
