"""Helpers of the Agent Protocol servicer's tests (test_protocol_servicer.py,
test_fuzz_regressions.py): a call that must be refused with a code and a reason."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import grpc
import pytest

from opentinker_api.common.v1 import errors_pb2
from opentinker_runtime.core.errors import REASON_METADATA_KEY


async def refused(call: Awaitable[Any], code: grpc.StatusCode, reason: str, details: str = "") -> grpc.aio.AioRpcError:
    """The call fails with `code`, the ErrorReason `reason` in `opentinker-reason`, and `details` in its message."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    error = caught.value
    assert error.code() == code, (error.code(), error.details())
    trailing = dict(error.trailing_metadata() or ())
    assert trailing.get(REASON_METADATA_KEY) == f"ERROR_REASON_{reason}", (trailing, error.details())
    errors_pb2.ErrorReason.Value(f"ERROR_REASON_{reason}")  # a name clients can parse
    assert details in (error.details() or "")
    return error
