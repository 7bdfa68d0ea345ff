"""`python -m opentinker.dashboard --scheduler HOST:PORT [--host H] [--port N]` and
`opentinker dashboard ...`: serve until SIGTERM or Ctrl-C (a graceful stop). The key for
requests without one comes from OPENTINKER_API_KEY, the file in OPENTINKER_API_KEY_FILE or
./.opentinker/admin.key (never from an argument: `ps` shows those)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

import structlog

from opentinker.client.credentials import resolve_api_key
from opentinker.dashboard.server import DashboardConfig, DashboardServer

log = structlog.get_logger("opentinker.dashboard")
STOP_POLL_SECONDS = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scheduler", default="127.0.0.1:50051", help="scheduler address (default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default %(default)s; anyone who reaches the port acts with "
                             "the dashboard's API key)")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port (default %(default)s; 0: any free port)")
    parser.add_argument("--log-format", choices=("json", "console"), default="json",
                        help="log lines on stderr (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    from opentinker_runtime.core.logging import configure_logging  # the server's logs: the runtime's format

    configure_logging("info", args.log_format, service="dashboard")
    config = DashboardConfig(scheduler=args.scheduler, host=args.host, port=args.port, api_key=resolve_api_key())
    try:
        server = DashboardServer(config)
    except OSError as error:
        print(f"error: cannot listen on {args.host}:{args.port}: {error.strerror}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: _request_stop(stop, number))
    server.start()
    print(f"dashboard: {server.url}", flush=True)
    _wait_for(stop)
    server.stop()
    return 0


def _wait_for(stop: threading.Event) -> None:
    """Wait in short slices: a signal the kernel hands to one of gRPC's threads only sets a flag,
    and the main thread runs the handler when it next wakes (a plain `wait()` may never wake)."""
    while not stop.wait(STOP_POLL_SECONDS):
        pass


def _request_stop(stop: threading.Event, signum: int) -> None:
    log.info("signal_received", signal=signal.Signals(signum).name)
    stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m opentinker.dashboard",
                                     description="Serve the OpenTinker web dashboard.")
    add_arguments(parser)
    return run(parser.parse_args(argv))

