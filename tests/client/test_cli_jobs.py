"""`opentinker run/jobs` exit codes and messages (no stack needed for these)."""

import subprocess
import sys

CLI = [sys.executable, "-m", "opentinker.cli.main"]


def run(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def test_an_invalid_spec_file_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("type: RL\ntraining: {group_sise: 2}\n")
    result = run("run", str(path), "--scheduler", "127.0.0.1:1")
    assert result.returncode == 2
    assert "spec.training.group_sise: unknown field" in result.stderr
