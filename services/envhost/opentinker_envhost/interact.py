"""The Interact stream: every request answered once, with its sequence, as soon as it is done.

Requests are handled concurrently, so one slow game does not hold up the other sessions on the
stream; responses may therefore arrive out of order (match them by `sequence`). Requests for
the same session are applied in the order they arrived (the session's lock is FIFO and is
taken before any await). A request that fails is answered with an ErrorDetail and the stream
goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable

import grpc
import structlog

from opentinker.api.common.v1 import errors_pb2
from opentinker.api.envhost.v1 import envhost_service_pb2 as pb

log = structlog.get_logger(__name__)

Handler = Callable[[pb.InteractRequest], Awaitable[pb.InteractResponse]]
_END = object()


class InteractPump:
    """Reads requests, runs `handle` for each in its own task, yields the answers."""

    def __init__(self, handle: Handler, requests: AsyncIterable[pb.InteractRequest]) -> None:
        self.handle = handle
        self.requests = requests
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.in_flight: set[asyncio.Task[None]] = set()

    async def responses(self) -> AsyncIterator[pb.InteractResponse]:
        reader = asyncio.create_task(self._read())
        try:
            while (item := await self.queue.get()) is not _END:
                yield item  # type: ignore[misc]
            await reader  # re-raises a failure to read the request stream
        finally:
            reader.cancel()
            for task in list(self.in_flight):
                task.cancel()

    async def _read(self) -> None:
        try:
            async for request in self.requests:
                task = asyncio.create_task(self._answer(request))
                self.in_flight.add(task)
                task.add_done_callback(self.in_flight.discard)
            await asyncio.gather(*self.in_flight)
        finally:
            self.queue.put_nowait(_END)

    async def _answer(self, request: pb.InteractRequest) -> None:
        try:
            answer = await self.handle(request)
        except Exception as error:  # noqa: BLE001 - a bug of ours still gets its request an answer
            log.exception("interact_request_failed", sequence=request.sequence)
            answer = pb.InteractResponse(sequence=request.sequence, error=errors_pb2.ErrorDetail(
                code=grpc.StatusCode.INTERNAL.value[0], message=f"internal error: {type(error).__name__}"))
        self.queue.put_nowait(answer)
