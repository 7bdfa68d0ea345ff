"""Helpers the end-to-end modules share: a job's state changes, and the CLI run with one key."""

from __future__ import annotations

import os
import subprocess
import sys

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client.scheduler_client import state_name
from harness.stack import LocalStack

CLI = [sys.executable, "-m", "opentinker.cli.main"]


def states_of(events: list[job_pb2.JobEvent]) -> list[str]:
    return [state_name(e.state_changed.to_state) for e in events if e.WhichOneof("payload") == "state_changed"]


def cli(stack: LocalStack, key: str, *args: str) -> subprocess.CompletedProcess:
    """`opentinker ARGS --scheduler <the stack's>` with `key` as its only OpenTinker setting."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")} | {"OPENTINKER_API_KEY": key}
    return subprocess.run([*CLI, *args, "--scheduler", stack.address("scheduler")], capture_output=True,
                          text=True, timeout=60, env=env)
