"""`opentinker logs`: a job's log lines (from its event stream), or a local service's log file.

    opentinker logs JOB              # the job's log lines, state changes, each step's headline
                                     # metrics and checkpoints so far (an environment error's
                                     # traceback indented under it)
    opentinker logs JOB -f           # ... and follow until the job ends
    opentinker logs --service trainer [-n 50] [-f] [--state-dir .opentinker]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.cli import exit_codes, state
from opentinker.cli.api import add_api_flags, message_json, scheduler_client
from opentinker.cli.topology import REDIS, SERVICE_NAMES
from opentinker.client.scheduler_client import state_name

LEVELS = {value: name.removeprefix("LEVEL_") for name, value in job_pb2.LogLine.Level.items()}
CONTINUATION = " " * 8
"""Before each further line of a message (e.g. a game's traceback under the error it raised)."""


def register(commands: argparse._SubParsersAction) -> None:
    logs = commands.add_parser("logs", help="a job's log lines, or a local service's log file")
    logs.add_argument("job_id", nargs="?", help="the job whose log lines to show")
    logs.add_argument("--service", choices=(*SERVICE_NAMES, REDIS), help="show this local service's log instead")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("-n", "--lines", type=int, default=50, help="--service: last N lines (default %(default)s)")
    logs.add_argument("--state-dir", type=Path, default=Path(".opentinker"),
                      help="--service: the local stack's state dir (default ./.opentinker)")
    add_api_flags(logs)
    logs.set_defaults(handler=cmd_logs)


def cmd_logs(args: argparse.Namespace) -> int:
    if args.service:
        return _service_log(args)
    if not args.job_id:
        print("error: name a job (opentinker logs JOB) or a local service (--service NAME)", file=sys.stderr)
        return exit_codes.BAD_INPUT
    with scheduler_client(args) as client:
        events = client.watch_job(args.job_id) if args.follow else client.read_events(args.job_id)
        for event in events:
            _print_event(event, args.json)
    return exit_codes.OK


SHOWN = ("log", "state_changed", "worker_lost", "metrics", "checkpoint")
"""What a job's log shows of its events (progress events, a phase each, are left out)."""
HEADLINE = ("reward/mean", "accuracy", "eval/reward/mean", "eval/accuracy", "truncated", "eval/truncated", "loss",
            "kl", "grad_norm", "match/win_rate", "env_errors", "eval/env_errors")
"""The metrics a step's line shows, in this order, when the step reported them (all: --json)."""


def _print_event(event: job_pb2.JobEvent, as_json: bool) -> None:
    kind = event.WhichOneof("payload")
    if kind not in SHOWN:
        return
    if as_json:
        print(json.dumps(message_json(event)), flush=True)
        return
    when = event.time.ToDatetime().strftime("%H:%M:%S") if event.HasField("time") else "--:--:--"
    if kind == "log":
        first, *more = event.log.message.split("\n")
        lines = [f"{when} {LEVELS.get(event.log.level, '?'):<7} [{event.log.source}] {first}",
                 *(f"{CONTINUATION}{line}" for line in more)]
        print("\n".join(lines), flush=True)
    elif kind == "state_changed":
        change = event.state_changed
        reason = f": {change.reason}" if change.reason else ""
        before = f"{state_name(change.from_state)} -> " if change.from_state else ""
        print(f"{when} STATE   {before}{state_name(change.to_state)}{reason}", flush=True)
    elif kind == "metrics":
        print(f"{when} METRICS {_metrics_line(event.metrics)}", flush=True)
    elif kind == "checkpoint":
        saved = event.checkpoint
        agents = f" (agents: {', '.join(sorted(saved.agent_checkpoint_ids))})" if saved.agent_checkpoint_ids else ""
        print(f"{when} CKPT    step {saved.step}: {saved.checkpoint_id}{agents}", flush=True)
    else:
        lost = event.worker_lost
        print(f"{when} WORKER  lost {lost.worker_id}: {lost.reason}", flush=True)


def _metrics_line(metrics: job_pb2.MetricsReported) -> str:
    """"step 3: reward/mean=0.25 loss=0.81" (the HEADLINE metrics it has, else its first few)."""
    values = dict(metrics.values)
    names = [name for name in HEADLINE if name in values] or sorted(values)[:6]
    agent = f" [{metrics.agent_id}]" if metrics.agent_id else ""
    shown = " ".join(f"{name}={values[name]:.4g}" for name in names)
    return f"step {metrics.step}{agent}: {shown}" + (f" (+{len(values) - len(names)} more)" if len(values) > len(names) else "")


def _service_log(args: argparse.Namespace) -> int:
    record = state.load(args.state_dir.resolve())
    if record is None:
        print(f"error: no stack recorded in {args.state_dir} (start one with `opentinker up`)", file=sys.stderr)
        return exit_codes.UNREACHABLE
    process = next((p for p in record.processes if p.name == args.service), None)
    if process is None:
        print(f"error: the stack in {args.state_dir} has no {args.service} process", file=sys.stderr)
        return exit_codes.NOT_FOUND
    path = args.state_dir / process.log
    with path.open("rb") as log:
        for line in _last_lines(log.read(), args.lines):
            print(line)
        while args.follow:
            chunk = log.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", "replace"))
                sys.stdout.flush()
            else:
                time.sleep(0.5)
    return exit_codes.OK


def _last_lines(data: bytes, count: int) -> list[str]:
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-count:] if count > 0 else []
