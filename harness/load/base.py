"""Constants shared by the load modules."""

from __future__ import annotations

import grpc

from opentinker_api.scheduler.v1 import job_pb2

S = job_pb2.Job
MiB = 1024 * 1024
CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)
RPC_TIMEOUT_S = 60.0
RANGE_STRIDE, RANGE_SIZE = 100, 64
"""Session i guesses in RANGE_STRIDE*i+1 .. RANGE_STRIDE*i+RANGE_SIZE: disjoint ranges."""
RSS_BOUND_MIB = 8.0
"""Largest growth of a service's end-of-round memory over the warm-up round's that counts as flat.
Measured without leaks (2 cores): the EnvHost wanders within 4.4 MiB over 19 rounds of 256
sessions, the Scheduler within 1.3 MiB over 5 rounds of 1,000 jobs and 50 watchers. A leak
passes 8 MiB when it keeps one game process (~2.5 MiB each) per round, 16 KiB per session over
CI's two measured rounds of 256, or 2 KiB per job over the bench's four of 1,000; smaller leaks
are left to the exact counts (sessions, processes, streams, file descriptors)."""
UNPLACEABLE_DEVICES = 64
"""Trainer devices each queued job asks for on one worker (the most a spec may ask)."""



def rpc_text(error: BaseException) -> str:
    """A failed call in one line (code and details)."""
    if isinstance(error, grpc.aio.AioRpcError):
        return f"{error.code().name}: {error.details()}"
    return str(error)
