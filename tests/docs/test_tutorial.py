"""docs/tutorial.md, executed exactly as written: its files are written from the page, its bash
blocks are typed into one terminal in an empty directory, its `output` blocks must match.

The only things set from outside are what the page asks of its reader beforehand: the
virtualenv first on PATH, and OT_BASE_PORT (the page's one documented knob) at a free block
of ports. Whatever happens, the page's EnvHost and stack are stopped afterwards.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.stack import pid_running, stack_pids
from tests._scripts import REPO_ROOT
from tests.docs.tutorial_blocks import parse_blocks, write_file
from tests.docs.tutorial_terminal import BashResult, Terminal

pytestmark = pytest.mark.timeout(600)

TUTORIAL = REPO_ROOT / "docs" / "tutorial.md"
PORTS_USED = 9
"""OT_BASE_PORT .. OT_BASE_PORT + 8: five services, the game's EnvHost, Redis, the dashboard and
the multi-turn game's EnvHost."""
BLOCK_TIMEOUT_S = 180
TRAINING_STEPS = 15
RELAY_STEPS = 10


@dataclass(frozen=True, kw_only=True)
class Transcript:
    workdir: Path
    results: list[BashResult]
    expected: dict[int, str]
    """Index into `results` -> the output block the page shows for it."""

    def result_of(self, command: str) -> BashResult:
        matches = [r for r in self.results if command in r.script]
        assert len(matches) == 1, f"expected one block running {command!r}, found {len(matches)}"
        return matches[0]


def free_port_block(count: int) -> int:
    """A base port whose next `count` ports can all be bound now (below the ephemeral range)."""
    for base in random.sample(range(20_000, 32_000, 10), 200):
        if all(_can_bind(port) for port in range(base, base + count)):
            return base
    raise RuntimeError(f"no block of {count} free ports found")


def _can_bind(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reader_environment() -> dict[str, str]:
    """The reader's shell: the virtualenv first on PATH, no OpenTinker settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENTINKER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OT_BASE_PORT"] = str(free_port_block(PORTS_USED))
    return env


def failure_report(result: BashResult, workdir: Path) -> str:
    logs = sorted(workdir.glob("*.log")) + sorted((workdir / ".opentinker" / "logs").glob("*.log"))
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs)
    return (f"tutorial block failed ({result.returncode}):\n{result.script}\n--- stdout\n{result.stdout}"
            f"\n--- stderr\n{result.stderr[-4000:]}\n{tails}")


def stop_everything(terminal: Terminal, workdir: Path) -> None:
    terminal.kill_leftovers()
    if (workdir / ".opentinker" / "stack.json").exists():
        subprocess.run([sys.executable, "-m", "opentinker.cli.main", "down", "--state-dir",
                        str(workdir / ".opentinker")], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Transcript]:
    workdir = tmp_path_factory.mktemp("tutorial").resolve()
    terminal = Terminal(workdir, reader_environment(), tmp_path_factory.mktemp("terminal"))
    results: list[BashResult] = []
    expected: dict[int, str] = {}
    started = time.monotonic()
    try:
        for block in parse_blocks(TUTORIAL.read_text()):
            if block.kind == "file":
                write_file(block, terminal.cwd)
            elif block.kind == "bash":
                result = terminal.run(block.body, timeout=BLOCK_TIMEOUT_S)
                assert result.returncode == 0, failure_report(result, workdir)
                if block.expected_output is not None:
                    expected[len(results)] = block.expected_output
                results.append(result)
        print(f"tutorial ran in {time.monotonic() - started:.1f} s: "
              + ", ".join(f"{r.seconds:.1f}" for r in results))
        yield Transcript(workdir=workdir, results=results, expected=expected)
    finally:
        stop_everything(terminal, workdir)


def test_every_output_block_is_what_its_command_printed(tutorial: Transcript) -> None:
    assert tutorial.expected, "the tutorial shows no checked output"
    for index, output in tutorial.expected.items():
        assert tutorial.results[index].stdout == output, tutorial.results[index].script
    play_check = tutorial.result_of("python check_game.py")
    assert "'ab7'  -> reward 0.33" in play_check.stdout


def test_the_job_succeeded(tutorial: Transcript) -> None:
    run = tutorial.result_of("opentinker run job.yaml")
    job_id = re.search(r"^job (job-\S+) SUCCEEDED: ", run.stdout, re.MULTILINE)
    assert job_id, run.stdout
    jobs_get = tutorial.result_of("opentinker jobs get")
    assert job_id.group(1) in jobs_get.stdout and re.search(r"\bSUCCEEDED\b", jobs_get.stdout), jobs_get.stdout


def test_the_reward_rose_the_way_the_tutorial_reads_it(tutorial: Transcript) -> None:
    output = tutorial.result_of("python results.py").stdout
    steps = re.findall(r"^step +(\d+) +reward ([\d.]+)$", output, re.MULTILINE)
    assert [int(step) for step, _ in steps] == list(range(1, TRAINING_STEPS + 1)), output
    first, last = map(float, re.search(r"first 5 steps ([\d.]+), last 5 steps ([\d.]+)", output).groups())
    assert last >= first + 0.3, output
    before, after = map(float, re.search(r"eval reward: ([\d.]+) before training, ([\d.]+) after", output).groups())
    assert after > before, output


def test_the_multi_turn_game_learned_and_its_own_metric_shows_it(tutorial: Transcript) -> None:
    """The relay job: a cut-off reply reached the game's on_truncated (truncated share and
    negative rewards early), `info` became env/buzzed, and both moved the way the page says."""
    table = tutorial.result_of("opentinker jobs metrics").stdout
    rows = [line.split() for line in table.splitlines()[2:] if len(line.split()) == 4]
    assert [int(row[0]) for row in rows] == list(range(1, RELAY_STEPS + 1)), table
    buzzed, truncated, reward = ([float(row[i]) for row in rows] for i in (1, 2, 3))
    assert buzzed[-1] >= buzzed[0] + 0.3 and truncated[-1] <= truncated[0] - 0.3, table
    assert min(reward) < 0 < reward[-1], table  # -0.5 per cut-off reply: the game's on_truncated decided


def test_stopping_leaves_no_process_running(tutorial: Transcript) -> None:
    down = tutorial.result_of("opentinker down")
    pids = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", down.stdout)]
    assert down.stdout.startswith("stopped 7 processes") and len(pids) == 7, down.stdout
    for pid_file in ("envhost.pid", "relay.pid"):
        envhost = int((tutorial.workdir / pid_file).read_text())
        deadline = time.monotonic() + 15  # the EnvHost got SIGTERM and finishes its graceful stop
        while pid_running(envhost) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not pid_running(envhost), f"the tutorial's EnvHost ({pid_file}) outlived `kill`"
    assert [pid for pid in pids if pid_running(pid)] == []
    assert stack_pids(tutorial.workdir / ".opentinker") == []
