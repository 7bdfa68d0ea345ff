"""Job commands: run / submit a YAML spec, watch, and jobs list | get | cancel | metrics.

    opentinker run examples/jobs/math_rl_from_scratch.yaml      # submit and watch to the end
    opentinker submit job.yaml                                  # print the new job's id
    opentinker watch JOB [--wandb PROJECT] [--tensorboard DIR]  # live bar, metrics table, curve
    opentinker jobs list [--state RUNNING] [--limit 20]
    opentinker jobs get JOB
    opentinker jobs cancel JOB [--reason TEXT]
    opentinker jobs metrics JOB [--format table|csv|jsonl] [-o FILE] [--plot curves.png]
    opentinker jobs samples JOB [--step N]      # what the model answered (cli/results.py)
    opentinker jobs artifacts JOB               # checkpoints and outputs to download

A spec is checked locally before anything is sent; errors point at the file's line. The
Scheduler's own INVALID_ARGUMENT (it names the field) is pointed at the line too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.cli import exit_codes, results
from opentinker.cli.api import add_api_flags, message_json, print_json, scheduler_client
from opentinker.cli.checkpoint_hint import checkpoint_lines
from opentinker.cli.progress import JobProgressView
from opentinker.cli.table import format_table
from opentinker.client import metrics_export
from opentinker.client.errors import InvalidArgument
from opentinker.client.scheduler_client import TERMINAL_STATES, SchedulerClient, state_name
from opentinker.client.spec import SpecError, load_job_spec
from opentinker.client.spec_yaml import SpecFile, parse_field_path

STATES = [name.removeprefix("STATE_") for name in job_pb2.Job.State.keys() if name != "STATE_UNSPECIFIED"]


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="submit a job spec (YAML) and watch it to the end")
    run.add_argument("spec", type=Path, help="path of the job's YAML spec")
    _add_logger_flags(run)
    submit = commands.add_parser("submit", help="submit a job spec (YAML) and print its id")
    submit.add_argument("spec", type=Path, help="path of the job's YAML spec")
    watch = commands.add_parser("watch", help="follow a job: progress bar, metrics table, reward curve")
    watch.add_argument("job_id")
    _add_logger_flags(watch)
    for parser, handler in ((run, cmd_run), (submit, cmd_submit), (watch, cmd_watch)):
        add_api_flags(parser)
        parser.set_defaults(handler=handler)

    jobs = commands.add_parser("jobs", help="list, inspect, cancel jobs; their metrics, samples and artifacts")
    actions = jobs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="jobs, newest first")
    listing.add_argument("--state", action="append", choices=STATES, metavar="STATE",
                         help=f"only jobs in this state (repeatable): {', '.join(STATES)}")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default %(default)s)")
    get = actions.add_parser("get", help="one job, with its spec and progress")
    get.add_argument("job_id")
    cancel = actions.add_parser("cancel", help="cancel a queued or running job")
    cancel.add_argument("job_id")
    cancel.add_argument("--reason", default="cancelled from the CLI")
    cancel.add_argument("--no-wait", action="store_true",
                        help="return once the cancel is requested (a running job stops at its workers' next "
                             "heartbeat; by default this waits for that)")
    metrics = actions.add_parser("metrics", help="a job's metrics as a table, CSV or JSONL; curves as PNG")
    metrics.add_argument("job_id")
    metrics.add_argument("--format", choices=("table", "csv", "jsonl"), default="table")
    metrics.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    metrics.add_argument("--plot", type=Path, metavar="PNG", help="also draw learning curves into this PNG")
    metrics.add_argument("--metric", action="append", default=[], metavar="NAME",
                         help="metrics to show or plot (repeatable; default: the headline ones)")
    for parser, handler in ((listing, cmd_list), (get, cmd_get), (cancel, cmd_cancel), (metrics, cmd_metrics)):
        add_api_flags(parser, json_output=parser is not metrics)
        parser.set_defaults(handler=handler)
    results.register_job_actions(actions)


def _add_logger_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wandb", metavar="PROJECT", help="also log metrics to this W&B project (needs wandb)")
    parser.add_argument("--tensorboard", metavar="DIR", help="also write metrics to a TensorBoard log dir")


def _job_line(job: job_pb2.Job) -> str:
    return f"job {job.job_id} {state_name(job.state)}: {job.status_message}"


def _print_ended(job: job_pb2.Job) -> None:
    """The job's final line, then its checkpoint and how to train from it (when it saved one)."""
    print("\n".join([_job_line(job), *checkpoint_lines(job)]))


def _job_exit_code(job: job_pb2.Job) -> int:
    return exit_codes.OK if job.state == job_pb2.Job.STATE_SUCCEEDED else exit_codes.FAILED


def _metric_loggers(args: argparse.Namespace, spec: job_pb2.JobSpec, name: str) -> list:
    """The loggers asked for: a W&B run named after the job, its spec as the run's config."""
    from opentinker.client.loggers import TensorBoardLogger, WandbLogger, job_config

    loggers: list = []
    try:
        if getattr(args, "wandb", None):
            loggers.append(WandbLogger(project=args.wandb, name=name or None, config=job_config(spec)))
        if getattr(args, "tensorboard", None):
            loggers.append(TensorBoardLogger(args.tensorboard))
    except BaseException:
        for logger in loggers:
            logger.close()
        raise
    return loggers


class LoggerUnavailable(Exception):
    """A logger asked for cannot start (its package is missing, or it failed to start)."""


def _start_loggers(args: argparse.Namespace, spec: job_pb2.JobSpec, name: str) -> list:
    from opentinker.client.loggers import MissingLoggerPackage

    try:
        return _metric_loggers(args, spec, name)
    except MissingLoggerPackage as error:
        raise LoggerUnavailable(str(error)) from None
    except Exception as error:  # noqa: BLE001 - e.g. a W&B login that failed: say so, submit nothing
        raise LoggerUnavailable(f"the metrics logger could not start: {type(error).__name__}: {error}") from None


def _loggers_of(client: SchedulerClient, job_id: str, args: argparse.Namespace) -> list:
    """`watch`'s loggers, for a job submitted before (its spec read back for the W&B config)."""
    if not (getattr(args, "wandb", None) or getattr(args, "tensorboard", None)):
        return []
    job = client.get_job(job_id)
    return _start_loggers(args, job.spec, job.spec.display_name or job_id)


def _follow(client: SchedulerClient, job_id: str, args: argparse.Namespace, loggers: list | None = None) -> int:
    from opentinker.client.loggers import agent_metrics_callback, fan_out, samples_callback

    if loggers is None:
        try:
            loggers = _loggers_of(client, job_id, args)
        except LoggerUnavailable as error:
            print(f"error: {error}", file=sys.stderr)
            return exit_codes.BAD_INPUT
    view = None if args.json else JobProgressView()
    to_loggers = agent_metrics_callback(fan_out(*loggers)) if loggers else None
    samples_to_loggers = samples_callback(loggers)

    def on_event(event: job_pb2.JobEvent) -> None:
        if view:
            view.on_event(event)
        if to_loggers:
            to_loggers(event)
            samples_to_loggers(event)

    try:
        job = client.wait(job_id, on_event=on_event)
    finally:
        if view:
            view.close()
        for logger in loggers:
            logger.close()
    if args.json:
        print_json(message_json(job))
    else:
        _print_ended(job)
    return _job_exit_code(job)


def _submit(client: SchedulerClient, spec_path: Path, spec: job_pb2.JobSpec | None = None) -> job_pb2.Job:
    spec = spec if spec is not None else load_job_spec(spec_path)
    try:
        return client.submit_job(spec)
    except InvalidArgument as error:
        raise _at_spec_line(error, spec_path) from None


def _at_spec_line(error: InvalidArgument, spec_path: Path) -> Exception:
    """The Scheduler's INVALID_ARGUMENT, pointed at the field's line when it names a field."""
    field, _, problem = error.details.partition(": ")
    path = parse_field_path(field)
    if path is None or not problem:
        return error
    return SpecError(f"{problem} (refused by the scheduler)", path).at(SpecFile(spec_path).locate(path))


def cmd_run(args: argparse.Namespace) -> int:
    """Submit, then follow. With loggers: their packages are checked, then the Scheduler checks
    the spec (validate_only), then the loggers start, then the job is submitted; so a missing
    package, a spec the Scheduler refuses or a failed W&B login submits nothing, and only a job
    the Scheduler accepts starts a W&B run."""
    from opentinker.client.loggers import MissingLoggerPackage, require_packages

    spec = load_job_spec(args.spec)
    wanted = {"wandb": bool(getattr(args, "wandb", None)), "tensorboard": bool(getattr(args, "tensorboard", None))}
    try:
        require_packages(**wanted)
    except MissingLoggerPackage as error:
        print(f"error: {error} (nothing was submitted)", file=sys.stderr)
        return exit_codes.BAD_INPUT
    with scheduler_client(args) as client:
        if any(wanted.values()):
            _validate(client, args.spec, spec)
        try:
            loggers = _start_loggers(args, spec, spec.display_name)
        except LoggerUnavailable as error:
            print(f"error: {error} (nothing was submitted)", file=sys.stderr)
            return exit_codes.BAD_INPUT
        try:
            job = _submit(client, args.spec, spec)
        except BaseException:
            for logger in loggers:
                logger.close()
            raise
        if not args.json:
            print(f"submitted job {job.job_id}", file=sys.stderr)
        for logger in loggers:
            if hasattr(logger, "name_run"):
                logger.name_run(spec.display_name or job.job_id)
        return _follow(client, job.job_id, args, loggers)


def _validate(client: SchedulerClient, spec_path: Path, spec: job_pb2.JobSpec) -> None:
    try:
        client.validate_job(spec)
    except InvalidArgument as error:
        raise _at_spec_line(error, spec_path) from None


def cmd_submit(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        job = _submit(client, args.spec)
    if args.json:
        print_json(message_json(job))
    else:
        print(job.job_id)
    return exit_codes.OK


def cmd_watch(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        return _follow(client, args.job_id, args)


def cmd_list(args: argparse.Namespace) -> int:
    states = [job_pb2.Job.State.Value(f"STATE_{name}") for name in args.state or []]
    with scheduler_client(args) as client:
        jobs = []
        for job in client.list_jobs(states=states, page_size=min(args.limit, 100)):
            if len(jobs) >= args.limit:
                break
            jobs.append(job)
    if args.json:
        print_json([message_json(job) for job in jobs])
        return exit_codes.OK
    rows = [(j.job_id, job_pb2.JobType.Name(j.spec.type).removeprefix("JOB_TYPE_"), state_name(j.state),
             f"{j.progress.step}/{j.progress.total_steps}", j.spec.display_name[:24], j.status_message[:60])
            for j in jobs]
    print(format_table(("JOB", "TYPE", "STATE", "STEP", "NAME", "MESSAGE"), rows) if rows else "no jobs")
    return exit_codes.OK


def cmd_get(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        job = client.get_job(args.job_id)
    if args.json:
        print_json(message_json(job))
        return exit_codes.OK
    kind = job_pb2.JobType.Name(job.spec.type).removeprefix("JOB_TYPE_")
    fields = [("job", job.job_id), ("tenant", job.tenant_id), ("type", kind), ("name", job.spec.display_name),
              ("state", state_name(job.state)), ("step", f"{job.progress.step}/{job.progress.total_steps}"),
              ("message", job.status_message), ("events", job.last_event_sequence)]
    width = max(len(name) for name, _ in fields)
    print("\n".join([*(f"{name:<{width}}  {value}" for name, value in fields), *checkpoint_lines(job)]))
    return exit_codes.OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        job = client.cancel_job(args.job_id, reason=args.reason)
        if job.state not in TERMINAL_STATES and not args.no_wait:
            print(f"cancel requested; waiting for job {job.job_id} to stop ...", file=sys.stderr)
            job = client.wait(job.job_id)
    if args.json:
        print_json(message_json(job))
    else:
        _print_ended(job)
    return exit_codes.OK


def cmd_metrics(args: argparse.Namespace) -> int:
    with scheduler_client(args) as client:
        rows = metrics_export.metric_rows(client.read_events(args.job_id))
    if args.plot:
        if not rows:
            print(f"error: job {args.job_id} has reported no metrics yet: nothing to plot", file=sys.stderr)
            return exit_codes.FAILED
        metrics_export.plot_learning_curves(rows, args.plot, metrics=args.metric, title=f"job {args.job_id}")
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.format == "table":
        _print_metric_table(rows, args)
    else:
        writer = metrics_export.write_csv if args.format == "csv" else metrics_export.write_jsonl
        writer(rows, args.output or sys.stdout)
        if args.output:
            print(f"wrote {len(rows)} rows to {args.output}", file=sys.stderr)
    return exit_codes.OK


def _print_metric_table(rows: list[dict], args: argparse.Namespace) -> None:
    names = metrics_export.pick_curves(rows, args.metric)
    has_agents = any(row["agent"] for row in rows)
    headers = (*(("AGENT",) if has_agents else ()), "STEP", *names)
    table = [(*((row["agent"],) if has_agents else ()), row["step"],
              *(f"{row[name]:.4g}" if name in row else "" for name in names)) for row in rows]
    text = format_table(headers, table) if rows else f"job {args.job_id} has reported no metrics yet"
    if args.output:
        args.output.write_text(text + "\n")
    else:
        print(text)
