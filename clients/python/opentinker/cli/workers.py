"""`opentinker workers`: registered workers, their devices, which jobs lease them and which base
models LoRA jobs share on them.

    opentinker workers [--role trainer] [--json]
"""

from __future__ import annotations

import argparse
import time

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import worker_pb2
from opentinker.cli import exit_codes
from opentinker.cli.api import add_api_flags, message_json, print_json, scheduler_client
from opentinker.cli.table import format_table

ROLES = [name.removeprefix("ROLE_").lower() for name in resources_pb2.Role.keys() if name != "ROLE_UNSPECIFIED"]


def register(commands: argparse._SubParsersAction) -> None:
    workers = commands.add_parser("workers", help="registered workers, their devices and leases")
    workers.add_argument("--role", choices=ROLES, help="only workers of this role")
    add_api_flags(workers)
    workers.set_defaults(handler=cmd_workers)


def cmd_workers(args: argparse.Namespace) -> int:
    role = resources_pb2.Role.Value(f"ROLE_{args.role.upper()}") if args.role else 0
    with scheduler_client(args) as client:
        workers = list(client.list_workers(role=role))
    if args.json:
        print_json([message_json(worker) for worker in workers])
        return exit_codes.OK
    rows = [_row(worker) for worker in workers]
    print(format_table(("WORKER", "ROLE", "STATE", "ADDRESS", "DEVICES", "LEASED BY", "SHARED BASES", "HEARTBEAT"), rows)
          if rows else "no workers registered")
    return exit_codes.OK


def _row(worker: worker_pb2.Worker) -> tuple:
    leased = {device for lease in worker.leases for device in lease.device_ids}
    jobs = ", ".join(f"{lease.job_id} ({len(lease.device_ids)})" for lease in worker.leases) or "-"
    return (worker.worker_id, resources_pb2.Role.Name(worker.role).removeprefix("ROLE_").lower(),
            worker_pb2.Worker.State.Name(worker.state).removeprefix("STATE_"), worker.address,
            f"{len(leased)}/{len(worker.devices)} leased", jobs, shared_bases(worker), _ago(worker))


def shared_bases(worker: worker_pb2.Worker) -> str:
    """E.g. "builtin:tiny-llama@0/default on cpu:0: 3 jobs" for each base model the worker holds."""
    return "; ".join(f"{m.model_key} on {m.device_id}: {len(m.job_ids)} job{'s' * (len(m.job_ids) != 1)}"
                     for m in worker.resident_models) or "-"


def _ago(worker: worker_pb2.Worker) -> str:
    if not worker.HasField("last_heartbeat_time"):
        return "-"
    seconds = max(0.0, time.time() - worker.last_heartbeat_time.ToMicroseconds() / 1e6)
    return f"{seconds:.0f}s ago"
