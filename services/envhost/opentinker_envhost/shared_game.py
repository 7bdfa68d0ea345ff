"""A session whose game lives in a shared game process (`shared_worker`), as a `GameHandle`.

The session keeps the calls of its current episode (the constructor's config, the last reset
and the steps since, with what each returned). When its process is lost to another session's
failure, when its game turns out to be slow (`shared_placement.SLOW_CALL_S`: batching would
make the other sessions wait behind it, so such games get a process each, as before), or when its
process must serve fewer sessions (`shared_placement.BATCH_BUDGET_S`), the session is rebuilt in
another process by replaying those calls; each must return what it returned the
first time (games are deterministic for given reset arguments), or the session fails with
EnvironmentCrashed saying it could not be restored. A session is rebuilt at most
MAX_REBUILDS times per call.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentinker_env import StepResult
from opentinker_envhost import sandbox_protocol as wire
from opentinker_envhost.catalog import GameSpec
from opentinker_envhost.errors import EnvironmentCrashed, EnvironmentTimeout, NotYourTurnError
from opentinker_envhost.game_replies import invalid_reply, invalid_result, reply_error
from opentinker_envhost.game_results import (
    ResetOutcome,
    reset_outcome_from_wire,
    step_request,
    step_result_from_wire,
)
from opentinker_envhost.limits import SessionLimits
from opentinker_envhost.shared_worker import Blame, CallLost, SharedWorker, SoonReply

MAX_REBUILDS = 3
MAX_REPLAY_CALLS = 10_000
"""Longest episode (reset and steps) kept for replay; a longer one is not restorable."""

Placer = Callable[..., Any]
Then = Callable[[Any, BaseException | None], None]
"""Told a call's outcome: (its result, None), or (None, the error)."""
ResultOf = Callable[[dict[str, Any], Any, str], Any]
"""(request, what the game process answered, what) -> the checked result, recorded for replay."""


@dataclass
class EpisodeLog:
    """What replaying a session needs: construct, the last reset, the steps since."""

    config: dict[str, Any]
    calls: list[tuple[dict[str, Any], Any]] = field(default_factory=list)
    """(request, what it returned) since construct: a reset and its steps."""
    too_long: bool = False
    """The episode ran past MAX_REPLAY_CALLS: it is no longer kept (nor restorable)."""

    def requests(self) -> list[dict[str, Any]]:
        return [{"call": "construct", "config": self.config}, *(dict(request) for request, _ in self.calls)]

    def results(self) -> list[Any]:
        return [None, *(result for _, result in self.calls)]

    def record(self, request: dict[str, Any], result: Any) -> None:
        if request["call"] == "reset":
            self.calls.clear()
            self.too_long = False
        elif self.too_long:
            return
        elif len(self.calls) >= MAX_REPLAY_CALLS:
            self.calls.clear()
            self.too_long = True
            return
        self.calls.append((request, result))

    def forget_episode(self) -> None:
        """The game raised: the episode is over until the next reset."""
        self.calls.clear()
        self.too_long = False


class SharedGame:
    """A session's game in a shared process, moved to another one when it must be."""

    def __init__(self, placement: Any, key: tuple[str, ...], spec: GameSpec, config: dict[str, Any],
                 session_id: str, limits: SessionLimits) -> None:
        self.placement = placement
        self.key = key
        self.spec = spec
        self.session_id = session_id
        self.limits = limits
        self.log = EpisodeLog(config)
        self.worker: SharedWorker | None = None
        self.slot = -1
        self.last_pid = 0
        self.raised = False
        self.ended = ""

    @property
    def pid(self) -> int:
        """The pid of the process the game is (or was last) in."""
        return self.last_pid

    @classmethod
    async def open(cls, placement: Any, key: tuple[str, ...], spec: GameSpec, config: dict[str, Any], *,
                   session_id: str, limits: SessionLimits) -> SharedGame:
        game = cls(placement, key, spec, config, session_id, limits)
        game.worker, game.slot = await placement.place(key, session_id, private=placement.is_slow(key))
        game.last_pid = game.worker.pid
        try:
            await game._play({"call": "construct", "config": config}, f"{spec.cls.__name__}()", invalid=True)
        except BaseException:
            game._leave()
            raise
        return game

    async def reset(self, arguments: dict[str, Any], what: str) -> ResetOutcome:
        request = {"call": "reset", "arguments": arguments}
        return self._reset_result(request, await self._play(request, what, invalid=True), what)

    async def step(self, action: str, seat_kwargs: dict[str, str], what: str, *,
                   truncated: bool = False) -> StepResult:
        request = step_request(action, seat_kwargs, truncated)
        return self._step_result(request, await self._play(request, what), what)

    def reset_soon(self, arguments: dict[str, Any], what: str, then: Then) -> bool:
        """`reset` without a coroutine: see `step_soon`."""
        return self._play_soon({"call": "reset", "arguments": arguments}, what, True, self._reset_result, then)

    def step_soon(self, action: str, seat_kwargs: dict[str, str], what: str, then: Then) -> bool:
        """`step` without a coroutine, for a session whose process is up and that need not move:
        the call goes in the process's next batch and `then(result, None)`, or `then(None,
        error)`, follows from the reply's callback (a lost call is recovered as `step` would,
        in a task). False, with nothing sent, when the session must move first: use `step`."""
        request = {"call": "step", "action": action, "seat_kwargs": seat_kwargs}
        return self._play_soon(request, what, False, self._step_result, then)

    def _play_soon(self, request: dict[str, Any], what: str, invalid: bool, result_of: ResultOf, then: Then) -> bool:
        worker = self.worker
        if worker is None or self.ended or not worker.started or self.slot in worker.moving:
            return False
        worker.submit(self.slot, request,
                      on_reply=functools.partial(self._replied_soon, worker, request, what, invalid, result_of, then))
        return True

    def _replied_soon(self, worker: SharedWorker, request: dict[str, Any], what: str, invalid: bool,
                      result_of: ResultOf, then: Then, reply: SoonReply) -> None:
        lost = reply.exception()
        if isinstance(lost, (ConnectionError, wire.ProtocolError)):
            recovery = asyncio.get_running_loop().create_task(
                self._play_moved(request, what, invalid, result_of, worker.lost_call(reply)))
            recovery.add_done_callback(functools.partial(_deliver, then))
            return
        try:
            if lost is not None:
                raise lost
            result = result_of(request, self._answer(request, reply.result(), what, invalid), what)
        except Exception as error:  # noqa: BLE001 - the domain error (or a bug of ours) goes to `then`
            then(None, error)
            return
        then(result, None)

    async def _play_moved(self, request: dict[str, Any], what: str, invalid: bool, result_of: ResultOf,
                          lost: CallLost) -> Any:
        return result_of(request, await self._play_moving(request, what, invalid=invalid, lost=lost), what)

    def _reset_result(self, request: dict[str, Any], result: Any, what: str) -> ResetOutcome:
        outcome = self._checked(what, lambda: reset_outcome_from_wire(result, self.limits.max_observation_chars))
        self.log.record(request, result)
        return outcome

    def _step_result(self, request: dict[str, Any], result: Any, what: str) -> StepResult:
        step = self._checked(what, lambda: step_result_from_wire(result, self.limits.max_observation_chars))
        self.log.record(request, result)
        return step

    async def close(self) -> None:
        """The game's close(); the session leaves its process (kept for the next session of its
        key while any of its sessions may still use it)."""
        worker, self.worker = self.worker, None
        if worker is None:
            return
        try:
            if not worker.gone and not self.ended:
                reply = await worker.call(self.slot, {"call": "close", "keep": True})
                if not isinstance(reply, dict) or reply.get("ok") != {"reusable": True} or self.raised:
                    worker.tainted = True
                self.worker = worker
                self._result(reply, "close()", invalid=False)
        except CallLost:
            pass
        finally:
            self.worker = None
            worker.remove_slot(self.slot)
            self.placement.left(worker)

    async def discard(self) -> None:
        self._leave()

    # -- internals ------------------------------------------------------------------------------

    async def _play(self, request: dict[str, Any], what: str, *, invalid: bool = False) -> Any:
        """One call of this session's game, rebuilt elsewhere when its process was lost (or its
        game is slow); the call's result, or the domain error."""
        worker = self.worker
        if worker is None or self.ended or worker.gone or self.slot in worker.moving:
            return await self._play_moving(request, what, invalid=invalid)
        try:
            reply = await worker.call(self.slot, request)
        except CallLost as lost:
            return await self._play_moving(request, what, invalid=invalid, lost=lost)
        return self._answer(request, reply, what, invalid)

    async def _play_moving(self, request: dict[str, Any], what: str, *, invalid: bool,
                           lost: CallLost | None = None) -> Any:
        """`_play` for a session that must move first, or whose call was lost: a call that may
        have caused the loss (a SUSPECT) runs again in a process of its own, where a loss is its
        alone; one lost too often fails."""
        if self.ended:
            raise EnvironmentCrashed(f"{what}: the game's process {self.ended}")
        losses = {Blame.SUSPECT: 0, Blame.INNOCENT: 0}
        private = False
        while True:
            if lost is not None:
                if lost.blame is Blame.CULPRIT:
                    raise await self._lost_to(what)
                losses[lost.blame] += 1
                if losses[lost.blame] > MAX_REBUILDS:
                    raise self._unrestorable(what, "its game's process was lost again and again")
                private = private or lost.blame is Blame.SUSPECT
            worker = self.worker
            try:
                if (worker is None or worker.gone or self.slot in worker.moving
                        or (not worker.private and (private or self.placement.is_slow(self.key)))):
                    await self._rebuild(what, private=private)
                reply = await self.worker.call(self.slot, request)  # type: ignore[union-attr]
            except CallLost as error:
                lost = error
                continue
            return self._answer(request, reply, what, invalid)

    def _answer(self, request: dict[str, Any], reply: Any, what: str, invalid: bool) -> Any:
        seconds = reply.get("s") if type(reply) is dict else None
        if type(seconds) is float and request["call"] != "construct":
            self.placement.observe(self.key, seconds)
        return self._result(reply, what, invalid=invalid)

    async def _lost_to(self, what: str) -> EnvironmentCrashed | EnvironmentTimeout:
        """This call's own loss: the session fails as it would in a process of its own."""
        self.raised = True
        error = await self.worker.loss(what)  # type: ignore[union-attr]
        self.ended = error.message.removeprefix(f"{what} failed: the game's process ")
        self._leave()
        return error

    async def _rebuild(self, what: str, *, private: bool = False) -> None:
        """Move this session to another process (one of its own when `private` or its game is
        slow): replay its episode there."""
        self._leave()
        if self.log.too_long:
            raise self._unrestorable(what, f"its episode is over {MAX_REPLAY_CALLS} calls long (not kept for replay)")
        private = private or self.placement.is_slow(self.key)
        worker, slot = await self.placement.place(self.key, self.session_id, private=private)
        self.worker, self.slot, self.last_pid = worker, slot, worker.pid
        try:
            replies = await worker.replay(slot, self.log.requests())
        except CallLost as lost:
            if lost.blame is Blame.CULPRIT or private:  # the replay alone ended it: the episode did
                raise self._unrestorable(what, "replaying its episode ended that process too") from None
            raise  # another session's game ended it (or may have): the caller moves this one again
        expected = self.log.results()
        for reply, result in zip(replies, expected, strict=True):
            if not isinstance(reply, dict) or "ok" not in reply or reply["ok"] != result:
                raise self._unrestorable(what, "replaying its episode gave other results (the game is not "
                                               "deterministic for its reset arguments)")

    def _unrestorable(self, what: str, why: str) -> EnvironmentCrashed:
        self.raised = True
        self.ended = "was lost and could not be restored"
        self._leave()
        return EnvironmentCrashed(f"{what} failed: the game's process was lost (another session's game in "
                                  f"it failed, or the session moved) and {why}, so the session could not be "
                                  "restored")

    def _leave(self) -> None:
        """Leave the current process without waiting (its slot's game is dropped there)."""
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.forget(self.slot)
            self.placement.left(worker)

    def _result(self, reply: Any, what: str, *, invalid: bool) -> Any:
        if isinstance(reply, dict) and "ok" in reply:
            return reply["ok"]
        self.raised = True
        if self.worker is not None:
            self.worker.tainted = True  # its process noted the failure: it is not kept
        failure = reply_error(reply, what, invalid=invalid)
        if failure is None:
            self._kill_worker("sent an invalid reply; it was killed")
            raise invalid_reply(what, reply)
        if not isinstance(failure, NotYourTurnError):  # a turn out of order: the episode goes on
            self.log.forget_episode()
        raise failure

    def _checked(self, what: str, convert: Callable[[], Any]) -> Any:
        try:
            return convert()
        except (TypeError, ValueError) as error:
            self.raised = True
            self._kill_worker("sent an invalid result; it was killed")
            raise invalid_result(what, error) from None

    def _kill_worker(self, reason: str) -> None:
        """The process broke the protocol: it ends (the other sessions move), this session fails."""
        self.ended = reason
        worker = self.worker
        self._leave()
        if worker is not None:
            worker.kill(reason)


def _deliver(then: Then, task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        then(None, asyncio.CancelledError())
    elif (error := task.exception()) is not None:
        then(None, error)
    else:
        then(task.result(), None)
