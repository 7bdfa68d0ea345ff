"""What every command that calls the Scheduler shares: its flags, the client, and turning
failures into one clear line on stderr and an exit code (never a traceback).

The scheduler address: --scheduler, else $OPENTINKER_SCHEDULER, else the local stack recorded
in ./.opentinker (what `opentinker up` started here), else 127.0.0.1:50051.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.message import Message

from opentinker.cli import exit_codes
from opentinker.client.errors import OpenTinkerError
from opentinker.client.retry import RetryPolicy
from opentinker.client.scheduler_client import SchedulerClient
from opentinker.client.spec import SpecError
from opentinker.client.tls import ClientTls

SCHEDULER_ENV = "OPENTINKER_SCHEDULER"
DEFAULT_SCHEDULER = "127.0.0.1:50051"
CLI_RETRY = RetryPolicy(attempts=3, initial_delay=0.2, max_delay=1.0)
"""A person is waiting: give up on an unreachable scheduler within about a second."""

Handler = Callable[[argparse.Namespace], int]


def default_scheduler(state_dir: Path = Path(".opentinker"), environ: Mapping[str, str] | None = None) -> str:
    """$OPENTINKER_SCHEDULER, else the local stack's scheduler, else DEFAULT_SCHEDULER."""
    environ = os.environ if environ is None else environ
    if environ.get(SCHEDULER_ENV):
        return environ[SCHEDULER_ENV]
    return local_stack_scheduler(state_dir) or DEFAULT_SCHEDULER


def local_stack_scheduler(state_dir: Path = Path(".opentinker")) -> str | None:
    """The address of the scheduler `opentinker up` recorded in `state_dir`; None when none is."""
    from opentinker.cli import state

    try:
        record = state.load(state_dir)
    except (OSError, ValueError):
        record = None
    return next((p.address for p in record.processes if p.name == "scheduler"), None) if record else None


def add_api_flags(parser: argparse.ArgumentParser, *, json_output: bool = True) -> None:
    parser.add_argument("--scheduler", default=None, metavar="HOST:PORT",
                        help=f"scheduler address (default: ${SCHEDULER_ENV}, the local stack, or {DEFAULT_SCHEDULER})")
    if json_output:
        parser.add_argument("--json", action="store_true", help="print the result as JSON")


def scheduler_client(args: argparse.Namespace) -> SchedulerClient:
    args.scheduler = args.scheduler or default_scheduler()
    return SchedulerClient(args.scheduler, retry=CLI_RETRY, tls=local_stack_tls(args.scheduler))


def local_stack_tls(address: str, state_dir: Path = Path(".opentinker")) -> ClientTls | None:
    """The local stack's TLS files when `address` is its Scheduler and the environment names no
    CA of its own (as the admin key falls back to the local stack's)."""
    from opentinker.cli import state
    from opentinker.client.tls import tls_from_env

    if tls_from_env() is not None:
        return None
    try:
        record = state.load(state_dir)
    except (OSError, ValueError):
        return None
    if record is None or address not in {p.address for p in record.processes if p.name == "scheduler"}:
        return None
    return record.client_tls()


def run_api_command(handler: Handler, args: argparse.Namespace) -> int:
    """handler(args), with every failure reported as one line and its exit code."""
    try:
        return handler(args)
    except SpecError as error:
        return fail(f"invalid job spec: {error}", exit_codes.BAD_INPUT)
    except OpenTinkerError as error:
        return fail(explain(error, args), exit_codes.for_status(error.code))
    except OSError as error:  # a spec or output file that cannot be read or written
        return fail(f"{error.strerror or error}: {error.filename or ''}".rstrip(": "), exit_codes.BAD_INPUT)
    except KeyboardInterrupt:
        return fail("interrupted", exit_codes.INTERRUPTED)


def explain(error: OpenTinkerError, args: argparse.Namespace) -> str:
    address = getattr(args, "scheduler", None) or "the scheduler"
    if error.code == "UNAVAILABLE":
        return (f"cannot reach the scheduler at {address} ({error.details}). Is the stack running? "
                f"Start one with `opentinker up`, or point --scheduler or ${SCHEDULER_ENV} at it.")
    if error.code == "UNAUTHENTICATED":
        return (f"{error} (the key comes from $OPENTINKER_API_KEY, $OPENTINKER_API_KEY_FILE or "
                ".opentinker/admin.key)")
    return str(error)


def fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def message_json(message: Message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2))
