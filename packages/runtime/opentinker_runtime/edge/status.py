"""The one mapping of a DomainError onto the wire.

A failed call ends with the error's status code and message; its trailing metadata carries
`opentinker-reason: ERROR_REASON_<reason>` (when it has a reason), what the error adds itself
(`trailing_details`), and a game's traceback as `opentinker-traceback-bin` (UTF-8, head and
tail of at most MAX_TRACEBACK_CHARS characters). A stream that answers errors as items instead
of ending (EnvHost's Interact) sends `error_detail(error)`.
"""

from __future__ import annotations

import grpc

from opentinker_api.common.v1 import errors_pb2
from opentinker_api.conventions import REASON_METADATA_KEY, TRACEBACK_METADATA_KEY
from opentinker_runtime.edge.errors import DomainError, TrailingPairs, clip_middle

MAX_TRACEBACK_CHARS = 3000  # grpc's default metadata limit is 8 KiB


def status_code(error: DomainError) -> grpc.StatusCode:
    return grpc.StatusCode[error.code]


def reason_name(error: DomainError) -> str:
    """`ERROR_REASON_<reason>`, or "" for an error without a reason."""
    return f"ERROR_REASON_{error.reason}" if error.reason else ""


def trailing_metadata(error: DomainError) -> TrailingPairs:
    pairs: list[tuple[str, str | bytes]] = []
    if error.reason:
        pairs.append((REASON_METADATA_KEY, reason_name(error)))
    pairs.extend(error.trailing_details())
    if error.traceback:
        clipped = clip_middle(error.traceback, MAX_TRACEBACK_CHARS)
        pairs.append((TRACEBACK_METADATA_KEY, clipped.encode("utf-8", errors="replace")))
    return tuple(pairs)


async def abort(context: grpc.aio.ServicerContext, error: DomainError) -> None:
    """End the call with `error` (raises, as `context.abort` does)."""
    await context.abort(status_code(error), error.message, trailing_metadata=trailing_metadata(error))


def error_detail(error: DomainError) -> errors_pb2.ErrorDetail:
    """The in-stream form of `error`."""
    reason = errors_pb2.ErrorReason.Value(reason_name(error)) if error.reason else errors_pb2.ERROR_REASON_UNSPECIFIED
    return errors_pb2.ErrorDetail(code=status_code(error).value[0], message=error.message, reason=reason,
                                  traceback=error.traceback)
