"""A worker process for the crash-safety tests: one real `WorkerAgent`, callbacks to a file.

    python -m tests.scheduler._worker_process --scheduler 127.0.0.1:50051 --role trainer \
        --worker-id trainer-1 --cpu-devices 1 --events /tmp/trainer-1.jsonl

Every callback appends one JSON line to `--events` (flushed at once, so the test process can
read it while this one runs):

    {"event": "registered"}                                      (once, after the first RegisterWorker)
    {"event": "assignment", "job_id", "lease_id", "fencing_token", "role", "device_ids"}
    {"event": "stop", "job_id"}                                  (on_stop: cancel, job ended, lease lost)

The devices are CPU slots `cpu:0..N-1` built directly (no torch import: a fast start). Logs
(structlog JSON) go to stderr. The process runs until SIGTERM/SIGINT (agent.stop without
deregistering, so a test may also SIGKILL it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.workers.devices import CPU, Device
from opentinker_runtime.core.logging import configure_logging
from opentinker_runtime.workers.agent import WorkerAgent


class EventFile:
    """Appends one JSON object per line and flushes it."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, **fields: Any) -> None:
        self._file.write(json.dumps(fields, sort_keys=True) + "\n")
        self._file.flush()


async def run(args: argparse.Namespace) -> None:
    events = EventFile(Path(args.events))

    async def on_assignment(assignment: job_pb2.Assignment) -> None:
        events.write(event="assignment", job_id=assignment.lease.job_id,
                     lease_id=assignment.lease.lease_id,
                     fencing_token=assignment.lease.fencing_token, role=assignment.role,
                     device_ids=list(assignment.device_ids))

    async def on_stop(job_id: str) -> None:
        events.write(event="stop", job_id=job_id)

    devices = [Device(device_id=f"{CPU}:{index}", kind=CPU, name="CPU slot")
               for index in range(args.cpu_devices)]
    agent = WorkerAgent(scheduler_address=args.scheduler, role=args.role, worker_id=args.worker_id,
                        address=args.address,
                        devices=devices, on_assignment=on_assignment, on_stop=on_stop)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await agent.start()
    registered = asyncio.ensure_future(agent.wait_registered())
    registered.add_done_callback(lambda done: None if done.cancelled() else events.write(event="registered"))
    await stopping.wait()
    registered.cancel()
    await agent.stop(deregister=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", required=True, help="host:port of the scheduler")
    parser.add_argument("--role", required=True, help="trainer, rollout, coordinator, envhost")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--cpu-devices", type=int, default=0)
    parser.add_argument("--address", default="127.0.0.1:9",
                        help="host:port the worker registers (never dialled in these tests)")
    parser.add_argument("--events", required=True, help="JSON-lines file the callbacks append to")
    args = parser.parse_args(argv)
    configure_logging("info", "json", service=f"test-worker-{args.worker_id}", stream=sys.stderr)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
