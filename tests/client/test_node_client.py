"""The Node.js client (clients/node) against a live local stack, through its CLI.

The session pool's default stack (harness/stack_pool.py), shared with other directories' tests.
A tiny RL job is started in the background as soon as the first test runs (its workers' cold
start is most of its time); the quick error-path tests run meanwhile, and the last tests read
its output. Node and the client's node_modules are required: without them
these tests fail (run scripts/setup_node.sh), unless OPENTINKER_SKIP_NODE=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from harness.job_specs import TINY_LLAMA, builtin_model, math_env, rl_spec
from harness.stack import LocalStack, free_ports
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT

REPO = Path(__file__).resolve().parents[2]
NODE_CLIENT = REPO / "clients" / "node"
CLI = NODE_CLIENT / "bin" / "opentinker.js"
SKIP_ENV = "OPENTINKER_SKIP_NODE"
JOB_TIMEOUT_S = 90
EXIT_JOB_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_REFUSED, EXIT_NOT_FOUND = 1, 2, 3, 4, 5
"""The Python CLI's table (opentinker.cli.exit_codes), which the Node CLI shares."""

pytestmark = pytest.mark.skipif(os.environ.get(SKIP_ENV) == "1", reason=f"{SKIP_ENV}=1")


def tiny_rl_spec(total_steps: int = 2) -> dict:
    return rl_spec(total_steps, name="node client e2e", model=builtin_model(TINY_LLAMA, 3), environment=math_env(3, 2),
                   eval_episodes=2, checkpoint_every_steps=None)


@dataclass(frozen=True)
class NodeCli:
    node: str
    workdir: Path
    """Where the CLI runs: no .opentinker/admin.key there, so keys come only from the environment."""

    def env(self, api_key: str | None = None, *, key_file: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
        if api_key:
            env["OPENTINKER_API_KEY"] = api_key
        if key_file:
            env["OPENTINKER_API_KEY_FILE"] = str(key_file)
        return env

    def command(self, *args: str) -> list[str]:
        return [self.node, str(CLI), *args]

    def run(self, *args: str, api_key: str | None, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), cwd=self.workdir, env=self.env(api_key), capture_output=True,
                              text=True, timeout=timeout)

    def spec_file(self, spec: dict) -> str:
        path = self.workdir / f"spec-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(spec))
        return str(path)


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> NodeCli:
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node not found on PATH: install Node.js >= 20 (or set {SKIP_ENV}=1 to skip)")
    if not (NODE_CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir():
        pytest.fail(f"{NODE_CLIENT}/node_modules is missing: run scripts/setup_node.sh (or set {SKIP_ENV}=1)")
    return NodeCli(node=node, workdir=tmp_path_factory.mktemp("node-cli"))


@pytest.fixture(scope="module")
def stack(cli: NodeCli, stack_pool: StackPool) -> Iterator[LocalStack]:
    """The session pool's default stack, shared with other directories' tests."""
    with stack_pool.lease(DEFAULT) as local:
        yield local


@pytest.fixture(scope="module", autouse=True)
def tiny_job_run(cli: NodeCli, stack: LocalStack) -> Iterator[subprocess.Popen]:
    """`opentinker-node run` of a tiny RL job, started before the module's first test; it reads
    the key from the file `opentinker up` wrote (OPENTINKER_API_KEY_FILE)."""
    command = cli.command("run", cli.spec_file(tiny_rl_spec()), "--scheduler", stack.address("scheduler"))
    env = cli.env(key_file=stack.state_dir / "admin.key")
    process = subprocess.Popen(command, cwd=cli.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


@dataclass(frozen=True)
class FinishedRun:
    returncode: int
    stdout_lines: list[str]
    stderr: str
    job_id: str


@pytest.fixture(scope="module")
def finished_run(tiny_job_run: subprocess.Popen, stack: LocalStack) -> FinishedRun:
    try:
        stdout, stderr = tiny_job_run.communicate(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        tiny_job_run.kill()
        stdout, stderr = tiny_job_run.communicate()
        pytest.fail(f"node run did not finish in {JOB_TIMEOUT_S}s:\n{stdout}\n{stderr}\n{stack.logs()}")
    submitted = re.search(r"submitted job (\S+)", stderr)
    assert submitted, f"no job id on stderr (exit {tiny_job_run.returncode}):\n{stderr}\n{stdout}"
    return FinishedRun(tiny_job_run.returncode, stdout.splitlines(), stderr, submitted.group(1))


def assert_one_clean_error_line(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "    at " not in stderr and "node:internal" not in stderr, stderr


def test_the_clients_own_tests_pass(cli: NodeCli) -> None:
    """clients/node/test: watch reconnection after UNAVAILABLE, request_id retries, spec errors."""
    result = subprocess.run([cli.node, "--test", "test/"], cwd=NODE_CLIENT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^# pass [1-9]", result.stdout, re.MULTILINE) and "# fail 0" in result.stdout, result.stdout


def test_an_unreachable_scheduler_exits_3_with_one_line_and_no_stack_trace(cli: NodeCli) -> None:
    closed = f"127.0.0.1:{free_ports(1)[0]}"
    result = cli.run("list", "--scheduler", closed, "--no-retry", api_key="otk_0000000000000000_x")
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    assert_one_clean_error_line(result.stderr)
    assert f"cannot reach the scheduler at {closed}: UNAVAILABLE" in result.stderr


def test_a_spec_the_scheduler_rejects_exits_2_naming_invalid_argument_and_the_field(cli: NodeCli,
                                                                                    stack: LocalStack) -> None:
    spec = tiny_rl_spec()
    del spec["environment"]
    result = cli.run("submit", cli.spec_file(spec), "--scheduler", stack.address("scheduler"), api_key=stack.api_key)
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert_one_clean_error_line(result.stderr)
    assert "INVALID_ARGUMENT: spec.environment.env_name: must name an environment" in result.stderr
    assert "ERROR_REASON_INVALID_FIELD" in result.stderr


def test_an_unknown_spec_field_exits_2_naming_its_path_before_any_call(cli: NodeCli, stack: LocalStack) -> None:
    spec = tiny_rl_spec()
    spec["training"]["group_sise"] = 2
    result = cli.run("run", cli.spec_file(spec), "--scheduler", stack.address("scheduler"), api_key=stack.api_key)
    assert result.returncode == EXIT_BAD_INPUT
    assert_one_clean_error_line(result.stderr)
    assert "invalid job spec: spec.training.group_sise: unknown field" in result.stderr


@pytest.mark.parametrize("command", ["get", "watch", "cancel"])
def test_an_unknown_job_id_is_not_found(cli: NodeCli, stack: LocalStack, command: str) -> None:
    result = cli.run(command, "job-does-not-exist", "--scheduler", stack.address("scheduler"), api_key=stack.api_key)
    assert result.returncode == EXIT_NOT_FOUND
    assert_one_clean_error_line(result.stderr)
    assert "NOT_FOUND: job job-does-not-exist not found" in result.stderr


@pytest.mark.parametrize(("api_key", "problem"), [(None, "missing API key"),
                                                  ("otk_0000000000000000_not-a-real-secret", "invalid API key")])
def test_a_missing_or_invalid_api_key_is_unauthenticated(cli: NodeCli, stack: LocalStack, api_key: str | None,
                                                         problem: str) -> None:
    result = cli.run("list", "--scheduler", stack.address("scheduler"), api_key=api_key)
    assert result.returncode == EXIT_REFUSED
    assert_one_clean_error_line(result.stderr)
    assert f"UNAUTHENTICATED: {problem}" in result.stderr


def test_a_resubmitted_request_id_returns_the_same_job_and_a_cancelled_job_exits_1(cli: NodeCli,
                                                                                  stack: LocalStack) -> None:
    address, request_id = stack.address("scheduler"), str(uuid.uuid4())
    spec = cli.spec_file(tiny_rl_spec(total_steps=50))
    first = cli.run("submit", spec, "--request-id", request_id, "--scheduler", address, api_key=stack.api_key)
    again = cli.run("submit", spec, "--request-id", request_id, "--scheduler", address, api_key=stack.api_key)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    job_id = first.stdout.strip()
    assert job_id.startswith("job-") and again.stdout.strip() == job_id
    cancelled = cli.run("cancel", job_id, "--reason", "node test", "--scheduler", address, api_key=stack.api_key)
    assert cancelled.returncode == 0 and cancelled.stdout.startswith(f"job {job_id} "), cancelled.stderr
    watched = cli.run("watch", job_id, "--scheduler", address, api_key=stack.api_key, timeout=60)
    assert watched.returncode == EXIT_JOB_FAILED, watched.stdout + watched.stderr
    assert watched.stdout.splitlines()[-1].startswith(f"job {job_id} CANCELLED")


def test_run_watches_the_tiny_job_to_succeeded_with_metrics_lines(finished_run: FinishedRun, stack: LocalStack) -> None:
    lines = finished_run.stdout_lines
    assert finished_run.returncode == 0, "\n".join([*lines, finished_run.stderr, stack.logs()])
    assert lines[-1].startswith(f"job {finished_run.job_id} SUCCEEDED")
    events = [line for line in lines[:-1] if line.startswith("#")]
    assert len(events) == len(lines) - 1, lines
    sequences = [int(line.split()[0][1:]) for line in events]
    assert sequences == list(range(1, len(events) + 1))
    for step in (1, 2):
        metrics = next((line for line in events if re.match(rf"#\d+ metrics step {step} reward/mean=", line)), "")
        assert re.search(r" reward/mean=-?\d+(\.\d+)?(e-?\d+)?( |$)", metrics), events
        assert re.search(r" loss=-?\d+(\.\d+)?(e-?\d+)?( |$)", metrics), events
    # the reason is the final evaluation's score when the game judged any episode ("finished" otherwise)
    assert re.fullmatch(r"state RUNNING -> SUCCEEDED: (finished|eval accuracy \d\.\d{3} over \d+ episodes(; .+)?)",
                        [line.split(" ", 1)[1] for line in events if " state " in line][-1]), events
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key) as scheduler:
        job = scheduler.get_job(finished_run.job_id)
    assert job.state == job_pb2.Job.STATE_SUCCEEDED
    assert job.last_event_sequence == sequences[-1]


def test_get_and_list_print_the_job_as_proto_json(cli: NodeCli, stack: LocalStack, finished_run: FinishedRun) -> None:
    address = stack.address("scheduler")
    got = cli.run("get", finished_run.job_id, "--json", "--scheduler", address, api_key=stack.api_key)
    assert got.returncode == 0, got.stderr
    job = json.loads(got.stdout)
    assert job["job_id"] == finished_run.job_id and job["state"] == "STATE_SUCCEEDED"
    assert job["spec"]["environment"]["config"] == {"seed": 3, "eval_size": 2}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", job["end_time"])
    listed = cli.run("list", "--json", "--scheduler", address, api_key=stack.api_key)
    assert listed.returncode == 0, listed.stderr
    assert finished_run.job_id in [j["job_id"] for j in json.loads(listed.stdout)]
