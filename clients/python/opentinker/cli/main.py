"""`opentinker` command line entry point (`opentinker.cli.main:main`)."""

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path

import structlog

from opentinker.client.tls import ClientTls
from opentinker.cli import admin, completion, dashboard, envhost, jobs, logs, results, stack, state, workers
from opentinker.cli.api import run_api_command
from opentinker.cli.errors import StackError, StartFailed
from opentinker.cli.health_probe import SERVING
from opentinker.cli.launcher import UpConfig
from opentinker.cli.table import format_table
from opentinker.cli.topology import (DASHBOARD, DEFAULT_DASHBOARD_PORT, DEFAULT_GATEWAY_PORT, DEFAULT_REDIS_PORT,
                                     GATEWAY, REDIS, SERVICE_NAMES,
                                     SERVICES, metrics_url, resolve_metrics_ports, resolve_ports)

EXIT_NO_STACK = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opentinker", description="OpenTinker command line.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_up(commands.add_parser("up", help="start redis and the five services locally (on a running "
                                           "stack: start whatever of it is missing)"))

    status = commands.add_parser("status", help="show each process of the stack and its health")
    _add_state_dir(status)
    status.add_argument("--json", action="store_true", help="print the result as JSON")

    restart = commands.add_parser(
        "restart", help="stop one process of the local stack and start it again (same port, same settings)")
    restart.add_argument("service", choices=[REDIS, *SERVICE_NAMES, GATEWAY, DASHBOARD], metavar="SERVICE",
                         help="one of: " + ", ".join([REDIS, *SERVICE_NAMES, GATEWAY, DASHBOARD]))
    _add_state_dir(restart)
    restart.add_argument("--timeout", type=float, default=30.0,
                         help="seconds to wait for it to be SERVING again (default 30)")

    down = commands.add_parser("down", help="stop the local stack")
    _add_state_dir(down)
    down.add_argument("--timeout", type=float, default=10.0,
                      help="seconds to wait after SIGTERM before SIGKILL (default 10)")
    jobs.register(commands)
    results.register(commands)
    logs.register(commands)
    workers.register(commands)
    admin.register(commands)
    envhost.register(commands)
    dashboard.register(commands)
    completion.register(commands)
    return parser


def _add_up(up: argparse.ArgumentParser) -> None:
    _add_state_dir(up)
    up.add_argument("--redis-url", help="use this redis instead of starting the embedded one")
    up.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, metavar="N",
                    help=f"port of the embedded redis-server (default {DEFAULT_REDIS_PORT})")
    for service in SERVICES:
        up.add_argument(f"--{service.name}-port", type=int, metavar="N",
                        help=f"gRPC port of the {service.name} (default {service.default_port})")
    up.add_argument("--base-port", type=int, metavar="N",
                    help="give the services ports N..N+4, in the order "
                         + ", ".join(s.name for s in SERVICES))
    for service in SERVICES:
        up.add_argument(f"--{service.name}-metrics-port", type=int, metavar="N",
                        help=f"port of the {service.name}'s Prometheus /metrics (default: a free port)")
    up.add_argument("--metrics-base-port", type=int, metavar="N",
                    help="give the services' /metrics ports N..N+4, in the order of --base-port "
                         "(default: free ports picked at start; `opentinker status` shows them)")
    up.add_argument("--dashboard-port", type=int, default=DEFAULT_DASHBOARD_PORT, metavar="N",
                    help=f"HTTP port of the web dashboard (default {DEFAULT_DASHBOARD_PORT}; 0: a free port)")
    up.add_argument("--no-dashboard", action="store_true", help="do not start the web dashboard")
    up.add_argument("--gateway-port", type=int, default=DEFAULT_GATEWAY_PORT, metavar="N",
                    help=f"HTTP port of the Tinker-compatible gateway (default {DEFAULT_GATEWAY_PORT}; 0: a free "
                         f"port); point the tinker SDK at it with TINKER_BASE_URL")
    up.add_argument("--no-gateway", action="store_true", help="do not start the Tinker-compatible gateway")
    up.add_argument("--host", default="127.0.0.1",
                    help="address the services bind (default 127.0.0.1)")
    up.add_argument("--tls", nargs="?", const="mutual", default="off", choices=("off", "on", "mutual"),
                    help="TLS between the services and for clients, with a local CA made in "
                         "<state-dir>/tls (needs the openssl command): --tls alone is mutual TLS (every "
                         "caller presents the stack's certificate; the CLI in this directory does); "
                         "--tls on: server certificates only (default: off, plaintext)")
    up.add_argument("--timeout", type=float, default=30.0,
                    help="seconds to wait for everything to be SERVING (default 30)")
    up.add_argument("--json", action="store_true",
                    help="print the result as JSON (progress goes to stderr)")


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    """The options every stack command has."""
    parser.add_argument("--state-dir", type=Path, default=Path(".opentinker"),
                        help="where stack.json and logs/ live (default ./.opentinker)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log details (pids, signals) to stderr")


RUN_IN_FOREGROUND = ("envhost", "dashboard")
"""Commands that serve until stopped; they report their own failures."""


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if hasattr(args, "handler"):
        _configure_logging(False)
        args.root_parser = parser
        if args.command in RUN_IN_FOREGROUND:
            return args.handler(args)
        try:
            return run_api_command(args.handler, args)
        except BrokenPipeError:  # e.g. `opentinker jobs list | head -1`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    _configure_logging(args.verbose)
    args.state_dir = args.state_dir.resolve()
    handlers = {"up": cmd_up, "status": cmd_status, "down": cmd_down, "restart": cmd_restart}
    try:
        return handlers[args.command](args)
    except StackError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except state.StateDirBusy:
        print(f"error: another opentinker up/down is working on {args.state_dir}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `opentinker status --json | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _configure_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING
    structlog.configure(
        processors=[structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"),
                    structlog.dev.ConsoleRenderer(colors=False)],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_logger,
    )


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    """A logger on whatever sys.stderr is when a line is logged (not when logging was set up)."""
    return structlog.PrintLogger(sys.stderr)


def cmd_up(args: argparse.Namespace) -> int:
    overrides = {s.name: getattr(args, f"{s.name}_port") for s in SERVICES}
    flags = {s.name: f"--{s.name}-port (or --base-port)" for s in SERVICES}
    metrics_overrides = {s.name: getattr(args, f"{s.name}_metrics_port") for s in SERVICES}
    config = UpConfig(
        state_dir=args.state_dir, host=args.host, ports=resolve_ports(overrides, args.base_port),
        port_flags=flags | {REDIS: "--redis-port", DASHBOARD: "--dashboard-port (or --no-dashboard)",
                            GATEWAY: "--gateway-port (or --no-gateway)"},
        redis_port=args.redis_port, dashboard_port=None if args.no_dashboard else args.dashboard_port,
        gateway_port=None if args.no_gateway else args.gateway_port,
        redis_url=args.redis_url, timeout=args.timeout,
        metrics_ports=resolve_metrics_ports(metrics_overrides, args.metrics_base_port), tls=args.tls,
    )
    out = sys.stderr if args.json else sys.stdout

    def on_launch() -> None:
        print(f"starting the local stack in {args.state_dir} ...", file=out, flush=True)

    def progress(name: str, address: str, status: str, elapsed: float) -> None:
        print(f"  {name:<12} {address:<22} {status} ({elapsed:.1f}s)", file=out, flush=True)

    try:
        result = stack.up(config, progress, on_launch)
    except StartFailed as failure:
        return _report_start_failure(args, failure)
    if result.was_running:
        started = ", ".join(result.started) or "nothing to start"
        print(f"the stack in {args.state_dir} is already running; started: {started}", file=out)
    return _print_statuses(args, result.record, stack.inspect(result.record))


def cmd_restart(args: argparse.Namespace) -> int:
    def progress(name: str, address: str, status: str, elapsed: float) -> None:
        print(f"  {name:<12} {address:<22} {status} ({elapsed:.1f}s)", flush=True)

    print(f"restarting {args.service} of the stack in {args.state_dir} ...", flush=True)
    try:
        old, new = stack.restart(args.state_dir, args.service, progress, timeout=args.timeout)
    except StartFailed as failure:
        return _report_start_failure(args, failure)
    print(f"restarted {new.name} at {new.address}: pid {old.pid} -> {new.pid}")
    return 0


def _report_start_failure(args: argparse.Namespace, failure: StartFailed) -> int:
    for name, tail in failure.log_tails.items():
        log_path = args.state_dir / "logs" / f"{name}.log"
        print(f"--- last lines of {log_path} ---\n{tail or '(empty)'}\n---", file=sys.stderr)
    print(f"error: {failure}; stopped everything that was started", file=sys.stderr)
    return failure.exit_code


def cmd_status(args: argparse.Namespace) -> int:
    record = state.load(args.state_dir)
    if record is None:
        if args.json:
            print(json.dumps({"state_dir": str(args.state_dir), "running": False,
                              "processes": []}))
        else:
            print(f"no stack recorded in {args.state_dir}")
        return EXIT_NO_STACK
    return _print_statuses(args, record, stack.inspect(record))


def _print_statuses(args: argparse.Namespace, record: state.StackRecord,
                    statuses: list[stack.ProcessStatus]) -> int:
    """Print the table (or JSON); 0 when everything is SERVING, else 1. METRICS (`metrics_url`)
    is each service's Prometheus URL; redis, and a stack started before services had one, has none."""
    healthy = all(s.health == SERVING for s in statuses)
    metrics = {p.name: metrics_url(p.metrics_address) for p in record.processes if p.metrics_address}
    if args.json:
        processes = [asdict(s) | ({"metrics_url": metrics[s.name]} if s.name in metrics else {})
                     for s in statuses]
        tls = record.client_tls()
        print(json.dumps({"state_dir": str(args.state_dir), "running": True, "healthy": healthy,
                          "redis_url": record.redis_url, "processes": processes,
                          "tls": _tls_env(tls)}, indent=2))
    else:
        rows = [(s.name, s.address, metrics.get(s.name, "-"), "-" if s.pid is None else s.pid,
                 _alive_word(s.alive), s.health) for s in statuses]
        print(format_table(("SERVICE", "ADDRESS", "METRICS", "PID", "ALIVE", "HEALTH"), rows))
        _print_tls(record)
    return 0 if healthy else 1


def _tls_env(tls: ClientTls | None) -> dict[str, str]:
    """What a client elsewhere sets to dial the stack ({} when it runs without TLS)."""
    if tls is None:
        return {}
    env = {"OPENTINKER_TLS_CA_FILE": tls.ca_file}
    if tls.cert_file:
        env |= {"OPENTINKER_TLS_CERT_FILE": tls.cert_file, "OPENTINKER_TLS_KEY_FILE": tls.key_file}
    return env


def _print_tls(record: state.StackRecord) -> None:
    env = _tls_env(record.client_tls())
    if env:
        print("\nTLS is on: the CLI in this directory uses the stack's certificate; clients elsewhere set")
        print("  " + " ".join(f"{name}={value}" for name, value in env.items()))


def _alive_word(alive: bool | None) -> str:
    return "external" if alive is None else ("yes" if alive else "no")


def cmd_down(args: argparse.Namespace) -> int:
    record, remaining = stack.down(args.state_dir, args.timeout)
    if record is None:
        print(f"nothing to stop: no stack recorded in {args.state_dir}")
        return 0
    if remaining:
        pids = ", ".join(f"{p.name} (pid {p.pid})" for p in remaining)
        print(f"error: still running after SIGKILL: {pids}", file=sys.stderr)
        return 1
    stopped = ", ".join(f"{p.name} (pid {p.pid})" for p in record.processes)
    print(f"stopped {len(record.processes)} processes: {stopped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
