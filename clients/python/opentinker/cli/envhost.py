"""`opentinker envhost`: serve environments from this machine (a laptop included).

    opentinker envhost --game mygame=mypkg.games:MyGame --name my-games --port 50054 \\
        --scheduler scheduler.example.com:50051 --advertise myhost:50054

Runs the EnvHost service in the foreground (Ctrl-C stops it gracefully) with the built-in games
and every `--game NAME=module:Class` (imported and checked at start; a bad entry exits 2 naming
it). It registers with the Scheduler as an EnvHost under the API key it runs with: with a
tenant's key it is that tenant's own, and that tenant's jobs name it with
`environment: {env_name: mygame, envhost: my-games}`. Rollouts reach the games over gRPC and call
with the job's token only; this EnvHost checks each token with the Scheduler (CheckJobToken), so
it serves its tenant's running jobs and nobody else. `--redis-url` is for operators: an EnvHost
of the stack checks tokens in the stack's Redis instead.
The API key comes from OPENTINKER_API_KEY (or the file in OPENTINKER_API_KEY_FILE), never from an
argument; `--no-auth` is for a machine only you can reach. Other OPENTINKER_ENVHOST_* variables
(docs/settings.md) still apply.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from opentinker.client.credentials import API_KEY_ENV, API_KEY_FILE_ENV

PREFIX = "OPENTINKER_ENVHOST_"
EXIT_NOT_INSTALLED = 3


def register(commands: argparse._SubParsersAction) -> None:
    envhost = commands.add_parser("envhost", help="serve built-in and your own games (EnvHost service)")
    envhost.add_argument("--game", action="append", default=[], metavar="NAME=module:Class",
                         help="a game to serve besides the built-ins (repeatable)")
    envhost.add_argument("--port", type=int, default=50054, help="gRPC port (default %(default)s)")
    envhost.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: all interfaces)")
    envhost.add_argument("--scheduler", default="127.0.0.1:50051", help="scheduler to register with")
    envhost.add_argument("--advertise", default="auto",
                         help="host:port rollouts dial to reach this EnvHost (default: host:port)")
    envhost.add_argument("--name", help="the name jobs give in environment.envhost to play here")
    envhost.add_argument("--redis-url", help="operators: the stack's Redis, to check job tokens there "
                         "(default: ask the Scheduler)")
    envhost.add_argument("--no-auth", action="store_true", help="accept calls without an API key")
    envhost.set_defaults(handler=cmd_envhost)


def envhost_environment(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """The process environment the EnvHost runs with (flags win over inherited variables)."""
    env = dict(environ)
    env[f"{PREFIX}GAMES"] = ",".join(args.game) if args.game else env.get(f"{PREFIX}GAMES", "none")
    env[f"{PREFIX}PORT"] = str(args.port)
    env[f"{PREFIX}HOST"] = args.host
    env[f"{PREFIX}SCHEDULER_ADDRESS"] = args.scheduler
    env[f"{PREFIX}ADVERTISE_ADDRESS"] = args.advertise
    if args.name:
        env[f"{PREFIX}NAME"] = args.name
    if args.redis_url:
        env["OPENTINKER_REDIS_URL"] = args.redis_url
    env[f"{PREFIX}JOB_TOKEN_CHECK"] = "redis" if args.redis_url else "scheduler"
    if args.no_auth:
        env["OPENTINKER_AUTH"] = "disabled"
    elif not env.get(API_KEY_ENV) and env.get(API_KEY_FILE_ENV):
        env[API_KEY_ENV] = Path(env[API_KEY_FILE_ENV]).read_text().strip()
    env.pop(API_KEY_FILE_ENV, None)
    return env


def cmd_envhost(args: argparse.Namespace) -> int:
    try:
        import opentinker_envhost  # noqa: F401 - only checks that the service is installed
    except ImportError:
        print("error: the EnvHost service is not installed here; pip install the opentinker "
              "envhost package (services/envhost)", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    env = envhost_environment(args, dict(os.environ))
    command = [sys.executable, "-m", "opentinker_envhost"]
    os.execvpe(command[0], command, env)  # the service handles signals and exit codes itself
    return 0  # not reached
