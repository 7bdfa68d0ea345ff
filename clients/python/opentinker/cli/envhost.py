"""`opentinker envhost`: serve environments from this machine (a laptop included).

    opentinker envhost --game mygame=mypkg.games:MyGame --name my-games   # beside `opentinker up`
    opentinker envhost --game mygame=mypkg.games:MyGame --name my-games --port 50154 \\
        --scheduler scheduler.example.com:50051 --advertise myhost:50154

Runs the EnvHost service in the foreground (Ctrl-C stops it gracefully) with the built-in games
and every `--game NAME=module:Class` (imported and checked at start; a bad entry exits 2 naming
it). It registers with the Scheduler as an EnvHost under the API key it runs with: with a
tenant's key it is that tenant's own, and that tenant's jobs name it with
`environment: {env_name: mygame, envhost: my-games}`. Rollouts reach the games over gRPC and call
with the job's token only; this EnvHost checks each token with the Scheduler (CheckJobToken), so
it serves its tenant's running jobs and nobody else. `--redis-url` is for operators: an EnvHost
of the stack checks tokens in the stack's Redis instead.

Like the other commands it finds the local stack: the Scheduler is --scheduler, else
$OPENTINKER_SCHEDULER (or $OPENTINKER_ENVHOST_SCHEDULER_ADDRESS), else the one `opentinker up`
recorded in ./.opentinker, else 127.0.0.1:50051; the API key is $OPENTINKER_API_KEY, else the file
in $OPENTINKER_API_KEY_FILE, else ./.opentinker/admin.key (never an argument); `--no-auth` is for
a machine only you can reach. The port is --port, else 50054 when free (else any free port: the
local stack's own EnvHost has 50054). Other OPENTINKER_ENVHOST_* variables (docs/settings.md)
still apply. The first line on stderr says where it serves and which Scheduler and key it uses.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from opentinker.cli.api import DEFAULT_SCHEDULER, SCHEDULER_ENV, local_stack_scheduler
from opentinker.cli.ports import port_is_free
from opentinker.client.credentials import ADMIN_KEY_FILE, API_KEY_ENV, API_KEY_FILE_ENV, api_key_and_source

PREFIX = "OPENTINKER_ENVHOST_"
EXIT_NOT_INSTALLED = 3
DEFAULT_PORT = 50054
STATE_DIR = Path(".opentinker")


def register(commands: argparse._SubParsersAction) -> None:
    envhost = commands.add_parser("envhost", help="serve built-in and your own games (EnvHost service)")
    envhost.add_argument("--game", action="append", default=[], metavar="NAME=module:Class",
                         help="a game to serve besides the built-ins (repeatable)")
    envhost.add_argument("--port", type=int, help=f"gRPC port (default {DEFAULT_PORT}, or a free port when "
                         f"{DEFAULT_PORT} is taken, e.g. by the local stack's own EnvHost)")
    envhost.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: all interfaces)")
    envhost.add_argument("--scheduler", metavar="HOST:PORT", help=f"scheduler to register with (default: "
                         f"${SCHEDULER_ENV}, the local stack in ./.opentinker, or {DEFAULT_SCHEDULER})")
    envhost.add_argument("--advertise", default="auto",
                         help="host:port rollouts dial to reach this EnvHost (default: host:port)")
    envhost.add_argument("--name", help="the name jobs give in environment.envhost to play here")
    envhost.add_argument("--redis-url", help="operators: the stack's Redis, to check job tokens there "
                         "(default: ask the Scheduler)")
    envhost.add_argument("--no-auth", action="store_true", help="accept calls without an API key")
    envhost.set_defaults(handler=cmd_envhost)


@dataclass(frozen=True, kw_only=True)
class Target:
    """Which Scheduler the EnvHost registers with and the key it uses, with where each came from."""

    scheduler: str
    scheduler_source: str
    api_key: str
    key_source: str


def resolve_target(args: argparse.Namespace, environ: Mapping[str, str]) -> Target:
    """The Scheduler: --scheduler, the variables, the local stack, the default. The key: the
    variables, else ./.opentinker/admin.key, which goes only to the local stack's own Scheduler."""
    stack_scheduler = local_stack_scheduler(STATE_DIR)
    variable = next((v for v in (SCHEDULER_ENV, f"{PREFIX}SCHEDULER_ADDRESS") if environ.get(v)), None)
    if args.scheduler or variable:
        scheduler, source = (args.scheduler, "--scheduler") if args.scheduler else (environ[variable], f"${variable}")
    elif stack_scheduler:
        scheduler, source = stack_scheduler, f"the local stack in ./{STATE_DIR}"
    else:
        scheduler, source = DEFAULT_SCHEDULER, "the default; no stack recorded in ./.opentinker"
    if args.no_auth:
        return Target(scheduler=scheduler, scheduler_source=source, api_key="", key_source="")
    key, key_source = api_key_and_source(environ=environ)
    if key_source == str(STATE_DIR / ADMIN_KEY_FILE) and scheduler != stack_scheduler:
        key, key_source = "", ""  # the local stack's admin key never goes to another Scheduler
    return Target(scheduler=scheduler, scheduler_source=source, api_key=key, key_source=key_source)


def envhost_environment(args: argparse.Namespace, environ: Mapping[str, str],
                        target: Target | None = None) -> dict[str, str]:
    """The process environment the EnvHost runs with (flags win over inherited variables)."""
    target = target or resolve_target(args, environ)
    env = dict(environ)
    env[f"{PREFIX}GAMES"] = ",".join(args.game) if args.game else env.get(f"{PREFIX}GAMES", "none")
    env[f"{PREFIX}PORT"] = str(args.port if args.port is not None else serving_port(args.host))
    env[f"{PREFIX}HOST"] = args.host
    env[f"{PREFIX}SCHEDULER_ADDRESS"] = target.scheduler
    env[f"{PREFIX}ADVERTISE_ADDRESS"] = args.advertise
    if args.name:
        env[f"{PREFIX}NAME"] = args.name
    if args.redis_url:
        env["OPENTINKER_REDIS_URL"] = args.redis_url
    env[f"{PREFIX}JOB_TOKEN_CHECK"] = "redis" if args.redis_url else "scheduler"
    if args.no_auth:
        env["OPENTINKER_AUTH"] = "disabled"
    elif target.api_key:
        env[API_KEY_ENV] = target.api_key
    env.pop(API_KEY_FILE_ENV, None)
    return env


def serving_port(host: str) -> int:
    """DEFAULT_PORT when free, else a port the OS gives (the local stack's EnvHost holds DEFAULT_PORT)."""
    if port_is_free(host, DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.bind((host.strip("[]"), 0))
        return probe.getsockname()[1]


def describe_start(args: argparse.Namespace, env: Mapping[str, str], target: Target) -> str:
    """The line printed before serving: where, which Scheduler, which key (never the key itself)."""
    if args.no_auth:
        key = "no API key (--no-auth)"
    elif target.key_source:
        key = f"the API key from {target.key_source}"
    else:
        key = (f"no API key (set $OPENTINKER_API_KEY or $OPENTINKER_API_KEY_FILE; ./{STATE_DIR}/{ADMIN_KEY_FILE} "
               "is used only with the local stack's own scheduler)")
    return (f"envhost: serving on {env[f'{PREFIX}HOST']}:{env[f'{PREFIX}PORT']}; registering with the scheduler "
            f"at {target.scheduler} ({target.scheduler_source}) with {key}")


def cmd_envhost(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("opentinker_envhost") is None:  # the service runs as its own process
        print("error: the EnvHost service is not installed here; pip install the opentinker "
              "envhost package (services/envhost)", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    environ = dict(os.environ)
    target = resolve_target(args, environ)
    env = envhost_environment(args, environ, target)
    print(describe_start(args, env, target), file=sys.stderr, flush=True)
    command = [sys.executable, "-m", "opentinker_envhost"]
    os.execvpe(command[0], command, env)  # the service handles signals and exit codes itself
    return 0  # not reached
