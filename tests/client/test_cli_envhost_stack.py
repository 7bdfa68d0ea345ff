"""`opentinker envhost` finds the local stack as the other commands do: the Scheduler that
`opentinker up` recorded in ./.opentinker and that stack's admin key, with --scheduler and the
variables to override. The last test runs the command against a real Scheduler (auth on)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.cli import envhost, state
from opentinker.cli.main import build_parser
from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.core.embedded_redis import free_port
from tests.scheduler._harness import eventually, scheduler_server

STACK_SCHEDULER = "127.0.0.1:41051"


def record_stack(directory: Path, scheduler: str, admin_key: str) -> None:
    """What `opentinker up` leaves in ./.opentinker: stack.json and admin.key."""
    state_dir = directory / ".opentinker"
    state.save(state_dir, state.StackRecord(host="127.0.0.1", redis_url="redis://127.0.0.1:1", redis_external=True,
                                            processes=[state.ProcessRecord(name="scheduler", address=scheduler,
                                                                           pid=1, start_ticks=None, command=[],
                                                                           log="logs/scheduler.log")]))
    (state_dir / "admin.key").write_text(admin_key + "\n")


def environment(*flags: str, **environ: str) -> dict[str, str]:
    args = build_parser().parse_args(["envhost", "--port", "1", *flags])
    return envhost.envhost_environment(args, environ)


@pytest.fixture
def in_stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A working directory holding a local stack's record; its admin key."""
    key = new_api_key()
    record_stack(tmp_path, STACK_SCHEDULER, key)
    monkeypatch.chdir(tmp_path)
    return key


def test_it_registers_with_the_local_stacks_scheduler_under_its_admin_key(in_stack_dir: str) -> None:
    env = environment()
    assert env["OPENTINKER_ENVHOST_SCHEDULER_ADDRESS"] == STACK_SCHEDULER
    assert env["OPENTINKER_API_KEY"] == in_stack_dir


def test_flags_and_variables_override_the_stack(in_stack_dir: str) -> None:
    assert environment(OPENTINKER_SCHEDULER=STACK_SCHEDULER, OPENTINKER_API_KEY="otk_a_b")["OPENTINKER_API_KEY"] \
        == "otk_a_b"
    moved = environment(OPENTINKER_SCHEDULER="10.0.0.9:50051")
    assert moved["OPENTINKER_ENVHOST_SCHEDULER_ADDRESS"] == "10.0.0.9:50051"
    flagged = environment("--scheduler", "scheduler.example.com:443")
    assert flagged["OPENTINKER_ENVHOST_SCHEDULER_ADDRESS"] == "scheduler.example.com:443"
    for other in (moved, flagged):  # the local stack's admin key goes to the local stack's Scheduler only
        assert "OPENTINKER_API_KEY" not in other
    assert "OPENTINKER_API_KEY" not in environment("--no-auth")


def test_without_a_stack_it_keeps_the_old_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = environment()
    assert env["OPENTINKER_ENVHOST_SCHEDULER_ADDRESS"] == "127.0.0.1:50051" and "OPENTINKER_API_KEY" not in env


def test_the_default_port_moves_off_one_that_is_taken() -> None:
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", envhost.DEFAULT_PORT))
            holder.listen(1)
        except OSError:
            pass  # taken already (by a stack's own EnvHost, say): the same case
        port = envhost.serving_port("127.0.0.1")
    assert port != envhost.DEFAULT_PORT and port > 0


def test_the_command_registers_with_the_scheduler_recorded_here(redis_url: str, tmp_path: Path) -> None:
    admin_key = new_api_key()
    port = free_port()

    async def scenario() -> str:
        async with scheduler_server(redis_url, admin_key=admin_key) as h:
            record_stack(tmp_path, h.address, admin_key)
            env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
            process = subprocess.Popen([sys.executable, "-m", "opentinker.cli.main", "envhost", "--name", "my-games",
                                        "--port", str(port)], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                async def registered() -> bool:
                    assert process.poll() is None, process.stdout.read()
                    workers = (await h.stub.ListWorkers(pb.ListWorkersRequest(role=resources_pb2.ROLE_ENVHOST))).workers
                    return any(w.name == "my-games" and w.address == f"127.0.0.1:{port}" for w in workers)

                await eventually(registered, timeout=60, interval=0.2)
            finally:
                process.send_signal(signal.SIGINT)
                output = process.communicate(timeout=30)[0]
            return output

    output = asyncio.run(scenario())
    first = output.splitlines()[0]
    assert first.startswith(f"envhost: serving on 127.0.0.1:{port}; registering with the scheduler at 127.0.0.1:")
    assert first.endswith("(the local stack in ./.opentinker) with the API key from .opentinker/admin.key"), first
    assert admin_key.split("_", 2)[2] not in output
