"""`opentinker up / status / down` run for real: redis-server plus the five services as
local processes on free ports, driven through the CLI in subprocesses."""

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.stack import SERVICES, free_ports, pid_running, port_args, run_cli, stack_pids

pytestmark = pytest.mark.timeout(180)

PROCESSES = ("redis", *SERVICES, "gateway", "dashboard")
UP_BUDGET_S = 30.0


# ---------------------------------------------------------------- helpers


def can_listen(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Stack:
    state_dir: Path
    ports: dict[str, int]
    up: subprocess.CompletedProcess
    up_seconds: float

    def recorded(self) -> dict:
        return json.loads((self.state_dir / "stack.json").read_text())


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Stack:
    state_dir = tmp_path_factory.mktemp("stack").resolve()
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES))))
    started = time.monotonic()
    result = run_cli("up", "--state-dir", str(state_dir), *port_args(ports), "--json")
    elapsed = time.monotonic() - started
    print(f"opentinker up took {elapsed:.2f}s")
    yield Stack(state_dir=state_dir, ports=ports, up=result, up_seconds=elapsed)
    run_cli("down", "--state-dir", str(state_dir), "--timeout", "5")


def up_ok(stack: Stack) -> None:
    assert stack.up.returncode == 0, f"up failed:\n{stack.up.stdout}\n{stack.up.stderr}"


# ---------------------------------------------------------------- tests


def test_up_reaches_serving_within_30s(stack):
    up_ok(stack)
    assert stack.up_seconds < UP_BUDGET_S, f"up took {stack.up_seconds:.1f}s"
    report = json.loads(stack.up.stdout)
    by_name = {p["name"]: p for p in report["processes"]}
    assert set(by_name) == set(PROCESSES)
    assert report["healthy"] is True
    for name, port in stack.ports.items():
        assert by_name[name]["address"] == f"127.0.0.1:{port}"
        assert by_name[name]["health"] == "SERVING"
        assert by_name[name]["alive"] is True
    progress = stack.up.stderr.splitlines()  # with --json, progress goes to stderr
    for name in PROCESSES:
        assert any(line.split()[:1] == [name] and "SERVING" in line for line in progress), name


def test_stack_json_records_detached_processes(stack):
    up_ok(stack)
    record = stack.recorded()
    processes = {p["name"]: p for p in record["processes"]}
    assert set(processes) == set(PROCESSES)
    assert record["redis_url"] == f"redis://127.0.0.1:{stack.ports['redis']}/0"
    for name, proc in processes.items():
        assert pid_running(proc["pid"]), name
        assert os.getsid(proc["pid"]) == proc["pid"], f"{name} is not in its own session"
        assert (stack.state_dir / "logs" / f"{name}.log").is_file()
    for name in SERVICES:
        assert processes[name]["command"][-2:] == ["-m", f"opentinker_{name}"]
    assert any((stack.state_dir / "redis").glob("appendonly*")), (
        "redis runs without its append-only file in the state dir"
    )
    assert sorted(stack_pids(stack.state_dir)) == sorted(p["pid"] for p in processes.values())


def test_status_reports_every_process_serving(stack):
    up_ok(stack)
    table = run_cli("status", "--state-dir", str(stack.state_dir))
    assert table.returncode == 0, table.stdout + table.stderr
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[2:]}
    assert set(rows) == set(PROCESSES)
    for name, port in stack.ports.items():
        assert rows[name][1] == f"127.0.0.1:{port}"
        assert rows[name][-1] == "SERVING"

    as_json = run_cli("status", "--state-dir", str(stack.state_dir), "--json")
    assert as_json.returncode == 0
    report = json.loads(as_json.stdout)
    assert report["healthy"] is True
    health = {p["name"]: p["health"] for p in report["processes"]}
    assert health == dict.fromkeys(PROCESSES, "SERVING")


def test_up_on_a_healthy_stack_starts_nothing_and_changes_nothing(stack):
    up_ok(stack)
    before = stack.recorded()
    again = run_cli("up", "--state-dir", str(stack.state_dir), *port_args(stack.ports), timeout=30)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout and "nothing to start" in again.stdout
    assert stack.recorded() == before
    assert run_cli("status", "--state-dir", str(stack.state_dir)).returncode == 0


def test_status_exit_1_when_a_service_died(stack):
    up_ok(stack)
    envhost = next(p for p in stack.recorded()["processes"] if p["name"] == "envhost")
    os.kill(envhost["pid"], 9)
    deadline = time.monotonic() + 10
    while pid_running(envhost["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    result = run_cli("status", "--state-dir", str(stack.state_dir), "--json")
    assert result.returncode == 1
    report = {p["name"]: p for p in json.loads(result.stdout)["processes"]}
    assert report["envhost"]["alive"] is False
    assert report["envhost"]["health"] != "SERVING"
    assert report["scheduler"]["health"] == "SERVING"


def kill_and_wait(pid: int) -> None:
    os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while pid_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_running(pid)


def recorded_by_name(stack: Stack) -> dict[str, dict]:
    return {p["name"]: p for p in stack.recorded()["processes"]}


def health_by_name(stack: Stack) -> tuple[int, dict[str, dict]]:
    result = run_cli("status", "--state-dir", str(stack.state_dir), "--json")
    return result.returncode, {p["name"]: p for p in json.loads(result.stdout)["processes"]}


def registered_worker(stack: Stack, name: str) -> dict:
    """The Scheduler's record of the stack's `name` worker (`opentinker workers --json`)."""
    env = {**os.environ, "OPENTINKER_API_KEY": (stack.state_dir / "admin.key").read_text().strip()}
    listed = run_cli("workers", "--scheduler", f"127.0.0.1:{stack.ports['scheduler']}", "--json",
                     timeout=30, env=env)
    assert listed.returncode == 0, listed.stderr
    address = f"127.0.0.1:{stack.ports[name]}"
    return next(w for w in json.loads(listed.stdout) if w["address"] == address)


def heartbeat_seconds(worker: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(worker["last_heartbeat_time"].replace("Z", "+00:00")).timestamp()


def test_up_on_a_running_stack_starts_what_died_and_leaves_the_rest(stack):
    up_ok(stack)
    before = recorded_by_name(stack)
    dead = ("envhost", "coordinator")  # services that start fast (no torch): CI time
    for name in dead:
        if pid_running(before[name]["pid"]):
            kill_and_wait(before[name]["pid"])
    killed_at = time.time()
    code, health = health_by_name(stack)
    assert code == 1 and {health[name]["health"] for name in dead} == {"DOWN"}

    again = run_cli("up", "--state-dir", str(stack.state_dir), "--json", "--timeout", "100", timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["healthy"] is True
    after = recorded_by_name(stack)
    for name in PROCESSES:
        assert after[name]["address"] == before[name]["address"], name
        assert after[name]["command"] == before[name]["command"], name
        if name in dead:
            assert after[name]["pid"] != before[name]["pid"] and pid_running(after[name]["pid"]), name
        else:
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted too"
    assert {line.split()[0] for line in again.stderr.splitlines() if "SERVING" in line} == set(dead)
    code, health = health_by_name(stack)
    assert code == 0 and all(p["health"] == "SERVING" and p["alive"] for p in health.values())
    for name in dead:  # back under their old address, with a heartbeat of the new process
        worker = registered_worker(stack, name)
        assert worker["state"] == "STATE_ALIVE" and heartbeat_seconds(worker) > killed_at, worker


def test_restart_replaces_one_service_on_its_port(stack):
    up_ok(stack)
    before = recorded_by_name(stack)
    restarted_at = time.time()
    result = run_cli("restart", "coordinator", "--state-dir", str(stack.state_dir), "--timeout", "100",
                     timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "coordinator" in result.stdout and "SERVING" in result.stdout
    after = recorded_by_name(stack)
    assert not pid_running(before["coordinator"]["pid"])
    assert after["coordinator"]["pid"] != before["coordinator"]["pid"] and pid_running(after["coordinator"]["pid"])
    assert after["coordinator"]["address"] == before["coordinator"]["address"]
    assert {n: p["pid"] for n, p in after.items() if n != "coordinator"} == {
        n: p["pid"] for n, p in before.items() if n != "coordinator"}
    code, health = health_by_name(stack)
    assert code == 0 and health["coordinator"]["health"] == "SERVING" and health["coordinator"]["alive"] is True
    worker = registered_worker(stack, "coordinator")
    assert worker["state"] == "STATE_ALIVE" and heartbeat_seconds(worker) > restarted_at

    unknown = run_cli("restart", "trainr", "--state-dir", str(stack.state_dir), timeout=30)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr


def test_status_shows_a_service_restarted_by_hand_as_serving(stack):
    """Someone restarted the envhost without opentinker: status asks its port, not its old pid."""
    up_ok(stack)
    envhost = recorded_by_name(stack)["envhost"]
    kill_and_wait(envhost["pid"])
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}, **envhost["env"],
           "OPENTINKER_API_KEY": (stack.state_dir / "admin.key").read_text().strip()}
    with open(stack.state_dir / "logs" / "envhost-by-hand.log", "wb") as log:
        by_hand = subprocess.Popen(envhost["command"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while health_by_name(stack)[1]["envhost"]["health"] != "SERVING":
            assert by_hand.poll() is None and time.monotonic() < deadline, "the envhost never served"
            time.sleep(0.2)
        code, health = health_by_name(stack)
        assert code == 0, health
        assert health["envhost"]["alive"] is False  # the recorded process is gone
        again = run_cli("up", "--state-dir", str(stack.state_dir), timeout=60)
        assert again.returncode == 0 and "nothing to start" in again.stdout, again.stdout + again.stderr
        assert by_hand.poll() is None
    finally:
        by_hand.terminate()
        by_hand.wait(timeout=30)


def test_down_stops_every_process(stack):
    up_ok(stack)
    pids = [p["pid"] for p in stack.recorded()["processes"]]
    result = run_cli("down", "--state-dir", str(stack.state_dir), "--timeout", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [pid for pid in pids if pid_running(pid)] == []
    assert stack_pids(stack.state_dir) == []
    assert not (stack.state_dir / "stack.json").exists()
    assert all(can_listen(port) for port in stack.ports.values())

    assert run_cli("status", "--state-dir", str(stack.state_dir)).returncode == 3
    again = run_cli("down", "--state-dir", str(stack.state_dir))
    assert again.returncode == 0
    assert "nothing to stop" in again.stdout


def test_taken_port_exits_2_and_starts_nothing(tmp_path):
    state_dir = tmp_path.resolve()
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES))))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports["rollout"]))
        squatter.listen()
        result = run_cli("up", "--state-dir", str(state_dir), *port_args(ports), timeout=30)
    assert result.returncode == 2
    assert str(ports["rollout"]) in result.stderr
    assert "--rollout-port" in result.stderr
    assert not (state_dir / "stack.json").exists()
    assert stack_pids(state_dir) == []
    assert all(can_listen(port) for name, port in ports.items() if name != "rollout")


def test_service_failing_at_start_stops_everything(tmp_path):
    state_dir = tmp_path.resolve()
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES))))
    env = {**os.environ, "OPENTINKER_TRAINER_LOG_LEVEL": "not-a-level"}
    result = run_cli("up", "--state-dir", str(state_dir), *port_args(ports), timeout=60, env=env)
    assert result.returncode == 1
    assert "trainer exited" in result.stderr
    assert "trainer.log" in result.stderr
    assert "not-a-level" in result.stderr, "the log tail of the failed service is not shown"
    assert not (state_dir / "stack.json").exists()
    assert stack_pids(state_dir) == []
    assert all(can_listen(port) for port in ports.values())


def test_timeout_stops_everything(tmp_path):
    state_dir = tmp_path.resolve()
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES))))
    result = run_cli("up", "--state-dir", str(state_dir), *port_args(ports), "--timeout", "0.05")
    assert result.returncode == 1
    assert "not SERVING after 0.05s" in result.stderr
    assert "--- last lines of" in result.stderr
    assert not (state_dir / "stack.json").exists()
    assert stack_pids(state_dir) == []
    assert all(can_listen(port) for port in ports.values())


def test_up_replaces_the_record_of_a_crashed_stack(tmp_path):
    state_dir = tmp_path.resolve()
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES))))
    args = ["--state-dir", str(state_dir), *port_args(ports)]
    try:
        assert run_cli("up", *args).returncode == 0
        crashed = json.loads((state_dir / "stack.json").read_text())["processes"]
        for proc in crashed:
            os.killpg(proc["pid"], 9)
        deadline = time.monotonic() + 10
        while any(pid_running(p["pid"]) for p in crashed) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run_cli("status", *args[:2]).returncode == 1

        again = run_cli("up", *args)
        assert again.returncode == 0, again.stderr
        fresh = json.loads((state_dir / "stack.json").read_text())["processes"]
        assert {p["pid"] for p in fresh}.isdisjoint(p["pid"] for p in crashed)
        assert run_cli("status", *args[:2]).returncode == 0
    finally:
        run_cli("down", "--state-dir", str(state_dir), "--timeout", "5")
    assert stack_pids(state_dir) == []


def test_external_redis_is_used_and_left_running(tmp_path):
    from opentinker_runtime.core.embedded_redis import EmbeddedRedis

    state_dir = (tmp_path / "state").resolve()
    ports = dict(zip((*SERVICES, "gateway", "dashboard"), free_ports(len(SERVICES) + 2)))
    with EmbeddedRedis(data_dir=tmp_path / "redis") as external:
        args = ["--state-dir", str(state_dir)]
        try:
            up = run_cli("up", *args, *port_args(ports), "--redis-url", external.url, "--json")
            assert up.returncode == 0, up.stderr
            report = {p["name"]: p for p in json.loads(up.stdout)["processes"]}
            assert report["redis"] == {"name": "redis", "address": f"127.0.0.1:{external.port}",
                                       "pid": None, "alive": None, "health": "SERVING"}
            recorded = json.loads((state_dir / "stack.json").read_text())
            assert [p["name"] for p in recorded["processes"]] == [*SERVICES, "gateway", "dashboard"]
            assert recorded["redis_url"] == external.url
        finally:
            down = run_cli("down", *args, "--timeout", "5")
        assert down.returncode == 0
        assert external.is_running() and pid_running(external.pid)
        assert stack_pids(state_dir) == []
