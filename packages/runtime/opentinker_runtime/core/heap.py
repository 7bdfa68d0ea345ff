"""A service process's garbage collector, tuned for short pauses (the Scheduler, the EnvHost).

Every RPC, allocation pass, game call and event makes short-lived objects; the interpreter's
cyclic collector stops the whole process while it runs, and a full collection walks every object
the process holds: the modules, the protobuf descriptors, the gRPC server, structures built at
startup that live as long as the process. Once the service has started, `settle_heap` collects
what startup left behind and moves everything that survived into the permanent generation
(`gc.freeze`), so later collections walk only objects made since: the longest pause measured by
bench/scheduler.py is what a p99 allocation latency sees, and an EnvHost's full collections
were tail latency for every session's step.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger(__name__)


def settle_heap() -> int:
    """Collect, then freeze every surviving object; how many are frozen now."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("heap_settled", frozen_objects=frozen)
    return frozen


async def settle_heap_once_started(health: object) -> None:
    """A start hook (the server is up, its objects built): `settle_heap` once."""
    settle_heap()
