"""Job commands: run / submit a YAML spec, jobs list|get|cancel, watch."""

from __future__ import annotations

import argparse
import json
import sys

from google.protobuf import json_format

from opentinker.api.scheduler.v1 import job_pb2
from opentinker.cli.progress import JobProgressView
from opentinker.cli.table import format_table
from opentinker.client.errors import OpenTinkerError
from opentinker.client.scheduler_client import SchedulerClient, state_name
from opentinker.client.spec import SpecError, load_job_spec

EXIT_JOB_FAILED = 1
EXIT_BAD_SPEC = 2


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="submit a job spec (YAML) and watch it to the end")
    run.add_argument("spec", help="path of the job's YAML spec")
    submit = commands.add_parser("submit", help="submit a job spec (YAML) and print its id")
    submit.add_argument("spec", help="path of the job's YAML spec")
    watch = commands.add_parser("watch", help="follow a job's events with a progress bar")
    watch.add_argument("job_id")
    jobs = commands.add_parser("jobs", help="list, inspect or cancel jobs")
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="jobs, newest first")
    actions.add_parser("get", help="one job").add_argument("job_id")
    actions.add_parser("cancel", help="cancel a job").add_argument("job_id")
    for parser, handler in ((run, cmd_run), (submit, cmd_submit), (watch, cmd_watch), (jobs, cmd_jobs)):
        parser.add_argument("--scheduler", default="127.0.0.1:50051", help="scheduler address (default %(default)s)")
        parser.add_argument("--json", action="store_true", help="print results as JSON")
        parser.set_defaults(handler=handler)
    for parser in actions.choices.values():
        parser.add_argument("--scheduler", default="127.0.0.1:50051", help="scheduler address (default %(default)s)")
        parser.add_argument("--json", action="store_true", help="print results as JSON")


def handle(args: argparse.Namespace) -> int:
    try:
        return args.handler(args)
    except SpecError as error:
        print(f"error: invalid job spec {args.spec}: {error}", file=sys.stderr)
        return EXIT_BAD_SPEC
    except OpenTinkerError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_JOB_FAILED


def _job_json(job: job_pb2.Job) -> str:
    return json.dumps(json_format.MessageToDict(job, preserving_proto_field_name=True), indent=2)


def _follow(client: SchedulerClient, job_id: str, as_json: bool) -> int:
    view = None if as_json else JobProgressView()
    job = client.wait(job_id, on_event=view.on_event if view else None)
    if view:
        view.close()
    print(_job_json(job) if as_json else f"job {job.job_id} {state_name(job.state)}: {job.status_message}")
    return 0 if job.state == job_pb2.Job.STATE_SUCCEEDED else EXIT_JOB_FAILED


def cmd_run(args: argparse.Namespace) -> int:
    spec = load_job_spec(args.spec)
    with SchedulerClient(args.scheduler) as client:
        job = client.submit_job(spec)
        if not args.json:
            print(f"submitted job {job.job_id}", file=sys.stderr)
        return _follow(client, job.job_id, args.json)


def cmd_submit(args: argparse.Namespace) -> int:
    spec = load_job_spec(args.spec)
    with SchedulerClient(args.scheduler) as client:
        job = client.submit_job(spec)
    print(_job_json(job) if args.json else job.job_id)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    with SchedulerClient(args.scheduler) as client:
        return _follow(client, args.job_id, args.json)


def cmd_jobs(args: argparse.Namespace) -> int:
    with SchedulerClient(args.scheduler) as client:
        if args.action == "list":
            jobs = list(client.list_jobs())
            if args.json:
                print(json.dumps([json_format.MessageToDict(j, preserving_proto_field_name=True) for j in jobs]))
            else:
                rows = [(j.job_id, job_pb2.JobType.Name(j.spec.type).removeprefix("JOB_TYPE_"), state_name(j.state),
                         f"{j.progress.step}/{j.progress.total_steps}", j.status_message[:60]) for j in jobs]
                print(format_table(("JOB", "TYPE", "STATE", "STEP", "MESSAGE"), rows))
            return 0
        job = client.get_job(args.job_id) if args.action == "get" else client.cancel_job(args.job_id)
        print(_job_json(job) if args.json else f"{job.job_id} {state_name(job.state)} {job.status_message}")
        return 0
