"""Gathering the ForwardBackward calls of the sessions of one shared base into cycles.

Every ForwardBackward of a session that stands on a shared base waits in its base's queue; a
runner per base takes everything queued as one cycle (`cycles.run_cycle`) on the torch thread.
Before a cycle starts, the runner waits up to `gather_s` for the base's other *active* sessions
(those that sent a ForwardBackward in the last `ACTIVE_WINDOW_S` and are still open), and starts
at once when each of them has a call queued: a base with one active session never waits, however
many idle sessions stand on it. While a cycle runs, the next one fills up: sessions that step
at the same pace fall into the same cycles.

A caller that gives up before its call is taken leaves the queue; once taken, the call finishes
with its cycle (the session's lock stays held until then, as for any call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from opentinker_trainer.batching import Datum
from opentinker_trainer.config import LossConfig
from opentinker_trainer.cycles import CycleCall, Outcome, run_cycle
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.training import ForwardBackwardResult

DEFAULT_GATHER_S = 0.05
ACTIVE_WINDOW_S = 30.0
"""A session that sent no ForwardBackward for this long is not waited for."""

RunInThread = Callable[[Callable[[], list[Outcome]]], Awaitable[list[Outcome]]]


@dataclass(eq=False)
class _Queued:
    call: CycleCall
    future: asyncio.Future[ForwardBackwardResult]
    taken: bool = False


@dataclass
class _Base:
    queued: list[_Queued] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    last_call: dict[int, tuple[float, TrainingSession]] = field(default_factory=dict)
    """id(session) -> (when it last queued a call, the session)."""

    def active(self, now: float) -> int:
        """Open sessions that queued a call within ACTIVE_WINDOW_S (the others are forgotten)."""
        self.last_call = {key: (when, session) for key, (when, session) in self.last_call.items()
                          if now - when <= ACTIVE_WINDOW_S and session.base is not None and session.base.routable}
        return len(self.last_call)


class CycleQueue:
    """Queues per base key; `holders(key)` is how many sessions stand on that base now."""

    def __init__(self, run_in_thread: RunInThread, holders: Callable[[str], int], *,
                 gather_s: float = DEFAULT_GATHER_S) -> None:
        self._run_in_thread = run_in_thread
        self._holders = holders
        self.gather_s = gather_s
        self._bases: dict[str, _Base] = {}

    async def forward_backward(self, session: TrainingSession, datums: Sequence[Datum],
                               loss: LossConfig) -> ForwardBackwardResult:
        """The call's result once the cycle it joins has run (its error raised here)."""
        base = self._bases.setdefault(session.base_key, _Base())
        queued = _Queued(CycleCall(session=session, datums=datums, loss=loss),
                         asyncio.get_running_loop().create_future())
        base.queued.append(queued)
        base.last_call[id(session)] = (asyncio.get_running_loop().time(), session)
        base.arrived.set()
        if base.runner is None:
            base.runner = asyncio.create_task(self._run(session.base_key, base))
        try:
            return await asyncio.shield(queued.future)
        except asyncio.CancelledError:
            if not queued.taken:
                base.queued.remove(queued)
            else:
                await asyncio.wait({queued.future})
            raise

    async def _run(self, key: str, base: _Base) -> None:
        try:
            while base.queued:
                await self._gather(key, base)
                taken, base.queued = base.queued, []
                for queued in taken:
                    queued.taken = True
                if taken:
                    await self._cycle(taken)
        finally:
            base.runner = None
            if base.queued:  # arrived while the last cycle ended
                base.runner = asyncio.create_task(self._run(key, base))
            elif self._bases.get(key) is base and not base.active(asyncio.get_running_loop().time()):
                del self._bases[key]

    async def _gather(self, key: str, base: _Base) -> None:
        """Wait up to gather_s for every active session of the base to have a call queued."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gather_s
        expected = min(base.active(loop.time()), self._holders(key))
        while len({id(q.call.session) for q in base.queued}) < expected:
            left = deadline - loop.time()
            if left <= 0:
                return
            base.arrived.clear()
            try:
                await asyncio.wait_for(base.arrived.wait(), left)
            except TimeoutError:
                return

    async def _cycle(self, taken: list[_Queued]) -> None:
        try:
            outcomes = await self._run_in_thread(lambda: run_cycle([q.call for q in taken]))
        except Exception as error:  # noqa: BLE001 - a bug in the cycle: every caller hears of it
            outcomes = [error] * len(taken)
        for queued, outcome in zip(taken, outcomes):
            if queued.future.done():
                continue
            if isinstance(outcome, BaseException):
                queued.future.set_exception(outcome)
            else:
                queued.future.set_result(outcome)
