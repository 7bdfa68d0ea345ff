"""The Interact stream: every request answered once, with its sequence, as soon as it is done.

Requests are handled concurrently, so one slow game does not hold up the other sessions on the
stream; responses may therefore arrive out of order (match them by `sequence`). Requests for
the same session are applied in the order they arrived (the session's lock is FIFO and is
taken before any await). A request that fails is answered with an ErrorDetail and the stream
goes on.

The pump reads with `context.read()` and writes with `context.write()` (no async generator
between grpc and the handler, nor in the interceptors around it, per message). A request that
`soon` takes (a step whose game can run it without a coroutine: `SessionManager.step_soon`) is
answered from a callback; every other one runs `handle` in a task of its own.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

import grpc
import structlog

from opentinker_api.common.v1 import errors_pb2
from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_runtime.core.wire_guard import UndecodableRequest, UndecodableRequestError

log = structlog.get_logger(__name__)

Handler = Callable[[pb.InteractRequest], Awaitable[pb.InteractResponse]]
Answer = Callable[[pb.InteractResponse], None]
Soon = Callable[[pb.InteractRequest, Answer], bool]
"""Takes a request it can answer without a task (True; it calls the Answer later), or not."""
_END = object()


class InteractPump:
    """Reads requests, answers each (`soon`, or `handle` in a task), writes the answers."""

    def __init__(self, handle: Handler, context: grpc.aio.ServicerContext, soon: Soon | None = None) -> None:
        self.handle = handle
        self.context = context
        self.soon = soon
        self.answers: collections.deque[object] = collections.deque()
        """Responses (and at the end _END) for the writer, in the order they were answered."""
        self.wakeup: asyncio.Future[None] | None = None
        """Set while the writer waits for `answers` to fill."""
        self.in_flight: set[asyncio.Task[None]] = set()
        self.unanswered = 0
        self.drained: asyncio.Future[None] | None = None
        """Set once every request read is answered, while the reader waits for that at the end."""

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        reader = loop.create_task(self._read())
        write, answers = self.context.write, self.answers  # looked up once (the context may be a wrapper)
        try:
            while True:
                if not answers:
                    self.wakeup = loop.create_future()
                    await self.wakeup
                    continue
                if (item := answers.popleft()) is _END:
                    break
                await write(item)
            await reader  # re-raises a failure to read the request stream
        finally:
            reader.cancel()
            for task in list(self.in_flight):
                task.cancel()

    async def _read(self) -> None:
        read, soon = self.context.read, self.soon
        try:
            while (request := await read()) is not grpc.aio.EOF:
                if isinstance(request, UndecodableRequest):
                    raise UndecodableRequestError(request)
                self.unanswered += 1
                if soon is not None and soon(request, self._answered):
                    continue
                task = asyncio.create_task(self._answer(request))
                self.in_flight.add(task)
                task.add_done_callback(self._task_done)
            if self.unanswered:
                self.drained = asyncio.get_running_loop().create_future()
                await self.drained
        finally:
            self._put(_END)

    def _put(self, item: object) -> None:
        self.answers.append(item)
        if self.wakeup is not None:
            if not self.wakeup.done():
                self.wakeup.set_result(None)
            self.wakeup = None

    def _answered(self, response: pb.InteractResponse) -> None:
        self._put(response)
        self._settle()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.in_flight.discard(task)
        if task.cancelled():  # no answer: the request is settled all the same
            self._settle()

    def _settle(self) -> None:
        self.unanswered -= 1
        if not self.unanswered and self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    async def _answer(self, request: pb.InteractRequest) -> None:
        try:
            answer = await self.handle(request)
        except Exception as error:  # noqa: BLE001 - a bug of ours still gets its request an answer
            log.exception("interact_request_failed", sequence=request.sequence)
            answer = internal_error(request.sequence, error)
        self._answered(answer)


def internal_error(sequence: int, error: BaseException) -> pb.InteractResponse:
    return pb.InteractResponse(sequence=sequence, error=errors_pb2.ErrorDetail(
        code=grpc.StatusCode.INTERNAL.value[0], message=f"internal error: {type(error).__name__}"))
