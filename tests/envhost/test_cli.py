"""`opentinker envhost --game NAME=module:Class`: the EnvHost served from the command line, with
auth on (the key from a file, never an argument) and a user game from outside the repository."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker.client.channels import keyed_channel
from opentinker_runtime.auth.api_keys import ApiKeyStore, new_api_key
from opentinker_runtime.core.embedded_redis import free_port
from opentinker_runtime.core.redis_store import connect
from tests.envhost._user_games import user_games  # noqa: F401 - the fixture

CLI = [sys.executable, "-m", "opentinker.cli.main"]


def install(redis_url: str, key: str) -> None:
    async def put() -> None:
        client = connect(redis_url)
        try:
            await ApiKeyStore(client=client).ensure(key, description="test service key")
        finally:
            await client.aclose()
    asyncio.run(put())


def listed(address: str, key: str) -> list[str]:
    with keyed_channel(address, key) as channel:
        reply = pb_grpc.EnvHostServiceStub(channel).ListEnvironments(pb.ListEnvironmentsRequest(), timeout=2)
    return [env.name for env in reply.environments]


def test_the_cli_serves_a_user_game_with_api_keys(user_games: Path, tmp_path: Path, redis_url: str) -> None:  # noqa: F811
    key = new_api_key()
    install(redis_url, key)
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    env |= {"PYTHONPATH": str(user_games), "OPENTINKER_API_KEY_FILE": str(key_file)}
    with (tmp_path / "envhost.log").open("wb") as log:
        process = subprocess.Popen([*CLI, "envhost", "--game", "guess=ot_user_games_test:GuessGame",
                                    "--port", str(port), "--redis-url", redis_url], env=env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    try:
        names = _eventually(lambda: listed(address, key), process, tmp_path / "envhost.log")
        assert "guess" in names and "math" in names
        with grpc.insecure_channel(address) as channel:  # no key: refused
            try:
                pb_grpc.EnvHostServiceStub(channel).ListEnvironments(pb.ListEnvironmentsRequest(), timeout=2)
                raise AssertionError("a call without an API key was answered")
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode(errors="replace")
        assert key.split("_", 2)[2] not in cmdline  # the secret never reaches the process arguments
        process.send_signal(2)  # Ctrl-C: a graceful stop
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert key.split("_", 2)[2] not in (tmp_path / "envhost.log").read_text()


def test_a_bad_game_entry_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    result = subprocess.run([*CLI, "envhost", "--game", "bad=nowhere.at_all:Game", "--no-auth",
                             "--port", str(free_port())], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "bad=nowhere.at_all:Game: cannot import module 'nowhere.at_all'" in result.stdout + result.stderr


def _eventually(check, process: subprocess.Popen, log: Path, timeout: float = 30.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, f"envhost exited {process.returncode}:\n{log.read_text()}"
        try:
            return check()
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
