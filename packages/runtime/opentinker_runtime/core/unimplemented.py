"""Servicers whose RPCs all answer UNIMPLEMENTED until the real implementation lands.

The generated `*Servicer` base classes have synchronous methods, which a `grpc.aio` server
cannot run; `unimplemented_servicer` subclasses the base with one `async def` per RPC that
aborts with UNIMPLEMENTED and names the full method, for unary and streaming RPCs alike.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

ServicerT = TypeVar("ServicerT")
LIVE_RPCS_HINT = "see README 'Live RPCs'"


def unimplemented_servicer(base_cls: type[ServicerT], service_full_name: str) -> ServicerT:
    """An instance of a `base_cls` subclass whose every RPC aborts with UNIMPLEMENTED."""
    return unimplemented_base(base_cls, service_full_name)()


def unimplemented_base(base_cls: type[ServicerT], service_full_name: str) -> type[ServicerT]:
    """A `base_cls` subclass answering UNIMPLEMENTED everywhere; subclass it and override the
    RPCs that are live, so a partly built service stays safe on an aio server."""
    methods = {name: _unimplemented_rpc(f"{service_full_name}/{name}")
               for name in rpc_method_names(base_cls)}
    return type(f"Unimplemented{base_cls.__name__}", (base_cls,), methods)


def rpc_method_names(base_cls: type) -> list[str]:
    """The RPC method names a generated servicer base class declares (public functions)."""
    return [name for name, member in vars(base_cls).items()
            if inspect.isfunction(member) and not name.startswith("_")]


def unimplemented_message(full_method: str) -> str:
    """The status message an unbuilt RPC answers with."""
    return f"{full_method} is not implemented yet; {LIVE_RPCS_HINT}"


def _unimplemented_rpc(full_method: str) -> Callable[..., Coroutine[Any, Any, None]]:
    message = unimplemented_message(full_method)

    async def rpc(self: object, request_or_iterator: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    rpc.__name__ = full_method.rpartition("/")[2]
    return rpc
