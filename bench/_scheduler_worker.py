"""One worker process for bench/scheduler.py: a real `WorkerAgent` against the bench's scheduler.

    python bench/_scheduler_worker.py --scheduler 127.0.0.1:PORT --role trainer --worker-id t0 --devices 8
    python bench/_scheduler_worker.py --scheduler 127.0.0.1:PORT --role coordinator --worker-id c0 --hold-ms 20

A trainer worker offers `--devices` CPU device slots and does nothing with its assignments (it
only heartbeats, which renews its leases). A coordinator worker (no devices: it offers the
scheduler's `coordinator_capacity` slots) ends every job it is assigned: after `--hold-ms` it
calls FinishJob(SUCCEEDED) with the assignment's lease, which frees the job's device slots.

Prints `READY <worker_id>` once registered; on SIGTERM/SIGINT (or, with --exit-on-stdin-eof,
when stdin closes: the bench died) it deregisters and prints one JSON line
`{"worker_id": ..., "assigned": n, "finished": n, "finish_errors": n}`, then exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys

os.environ.setdefault("OPENTINKER_AUTH", "disabled")

import grpc  # noqa: E402

from opentinker_api.scheduler.v1 import job_pb2  # noqa: E402
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb  # noqa: E402
from opentinker_api.scheduler.v1 import scheduler_service_pb2_grpc as pb_grpc  # noqa: E402
from opentinker_runtime.workers.devices import CPU, Device  # noqa: E402
from opentinker_runtime.core.logging import configure_logging  # noqa: E402
from opentinker_runtime.core.redis_store import Backoff  # noqa: E402
from opentinker_runtime.workers.agent import WorkerAgent  # noqa: E402

FINISH_ATTEMPTS = 5


class BenchWorker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.assigned = 0
        self.finished = 0
        self.finish_errors = 0
        self.channel: grpc.aio.Channel | None = None
        self.stub: pb_grpc.SchedulerServiceStub | None = None
        devices = [Device(device_id=f"{CPU}:{index}", kind=CPU, name="bench CPU slot")
                   for index in range(args.devices)]
        self.agent = WorkerAgent(
            scheduler_address=args.scheduler, role=args.role, worker_id=args.worker_id,
            address=args.address, devices=devices, on_assignment=self.on_assignment,
            on_stop=self.on_stop, backoff=Backoff(initial_seconds=0.05, factor=2.0, max_seconds=0.5))

    async def on_assignment(self, assignment: job_pb2.Assignment) -> None:
        self.assigned += 1
        if self.args.role != "coordinator":
            return
        await asyncio.sleep(self.args.hold_ms / 1000)
        request = pb.FinishJobRequest(lease=assignment.lease, final_state=job_pb2.Job.STATE_SUCCEEDED,
                                      message="bench job done")
        for attempt in range(1, FINISH_ATTEMPTS + 1):
            try:
                await self.stub.FinishJob(request, timeout=10)
            except grpc.aio.AioRpcError as error:
                if attempt == FINISH_ATTEMPTS or error.code() != grpc.StatusCode.UNAVAILABLE:
                    self.finish_errors += 1
                    print(f"FinishJob {assignment.lease.job_id} failed: {error.code().name} "
                          f"{error.details()}", file=sys.stderr, flush=True)
                    return
                await asyncio.sleep(0.05 * attempt)
                continue
            self.finished += 1
            return

    async def on_stop(self, job_id: str) -> None:
        """Nothing to stop: the bench never cancels."""

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        if self.args.exit_on_stdin_eof:  # the bench died without stopping us: do not linger
            loop.add_reader(sys.stdin.fileno(), stop_on_eof, loop, stop)
        self.channel = grpc.aio.insecure_channel(self.args.scheduler)  # on this loop
        self.stub = pb_grpc.SchedulerServiceStub(self.channel)
        await self.agent.start()
        await self.agent.wait_registered(timeout=self.args.register_timeout)
        print(f"READY {self.args.worker_id}", flush=True)
        await stop.wait()
        await self.agent.stop()
        await self.channel.close()
        with contextlib.suppress(BrokenPipeError):
            print(json.dumps({"worker_id": self.args.worker_id, "role": self.args.role,
                              "assigned": self.assigned, "finished": self.finished,
                              "finish_errors": self.finish_errors}), flush=True)


async def run(args: argparse.Namespace) -> None:
    await BenchWorker(args).run()  # built on the running loop


def stop_on_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    if not os.read(sys.stdin.fileno(), 4096):
        loop.remove_reader(sys.stdin.fileno())
        stop.set()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scheduler", required=True, help="host:port of the SchedulerService")
    p.add_argument("--role", required=True, choices=["trainer", "rollout", "coordinator"])
    p.add_argument("--worker-id", required=True)
    p.add_argument("--devices", type=int, default=0, help="CPU device slots offered (0 for a coordinator)")
    p.add_argument("--hold-ms", type=float, default=20.0,
                   help="coordinator: how long a job runs before FinishJob(SUCCEEDED)")
    p.add_argument("--address", default="127.0.0.1:1",
                   help="address registered for the worker (nothing connects to it in the bench)")
    p.add_argument("--register-timeout", type=float, default=30.0)
    p.add_argument("--log-level", default="warning")
    p.add_argument("--exit-on-stdin-eof", action="store_true",
                   help="stop when stdin closes (the bench holds it open while it runs)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level, "console", service=f"bench-worker-{args.worker_id}")
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
