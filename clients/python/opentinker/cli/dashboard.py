"""`opentinker dashboard`: serve the web dashboard (jobs, workers, tenants) in the foreground.

    opentinker dashboard --scheduler 127.0.0.1:50051 --port 8080

Requests without an API key act with this process's key (OPENTINKER_API_KEY, the file in
OPENTINKER_API_KEY_FILE, or ./.opentinker/admin.key): keep the default --host 127.0.0.1 unless
everyone who can reach the port may use that key. See `opentinker.dashboard`.
"""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    from opentinker.dashboard.run import add_arguments

    dashboard = commands.add_parser("dashboard", help="serve the web dashboard (jobs, workers, tenants)")
    add_arguments(dashboard)
    dashboard.set_defaults(handler=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from opentinker.dashboard.run import run

    return run(args)
