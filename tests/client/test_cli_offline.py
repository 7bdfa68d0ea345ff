"""The CLI without a stack: an unreachable scheduler, bad specs, usage errors, completion and
the live progress view. Every failure is one line on stderr, a meaningful exit code and no
traceback."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys

import pytest

from opentinker_api.common.v1 import progress_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker.cli import exit_codes
from opentinker.cli.main import main
from opentinker.cli.progress import JobProgressView

CLI = [sys.executable, "-m", "opentinker.cli.main"]
NOBODY = "127.0.0.1:1"
API_COMMANDS = [
    ["jobs", "list"], ["jobs", "get", "j"], ["jobs", "cancel", "j"], ["jobs", "metrics", "j"], ["watch", "j"],
    ["jobs", "samples", "j"], ["jobs", "artifacts", "j"], ["download", "job-0-final"],
    ["logs", "j"], ["workers"], ["admin", "tenants", "list"], ["admin", "tenants", "get", "t"],
    ["admin", "tenants", "create", "t"], ["admin", "quota", "t"], ["admin", "keys", "list", "t"],
    ["admin", "keys", "create", "t"], ["admin", "keys", "revoke", "k"],
]


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("command", API_COMMANDS, ids=" ".join)
def test_an_unreachable_scheduler_is_one_clear_line_and_exit_3(command, capsys):
    assert main([*command, "--scheduler", NOBODY]) == exit_codes.UNREACHABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: cannot reach the scheduler at {NOBODY}")
    assert "opentinker up" in err


def test_no_traceback_reaches_the_terminal_for_a_real_process(tmp_path):
    result = cli("jobs", "list", "--scheduler", NOBODY)
    assert result.returncode == exit_codes.UNREACHABLE
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize(("text", "expected"), [
    ("type: RL\ntraining:\n  total_steps: 3\n  group_sise: 2\n",
     ":4:3: spec.training.group_sise: unknown field (did you mean 'group_size'?"),
    ("type: RL\npolicy:\n  sampling:\n    temperature: hot\n",
     ":4:5: spec.policy.sampling.temperature: expected a number, got 'hot'"),
    ("spec:\n  type: RL\n  training: {total_steps: three}\n",
     ":3:14: spec.training.total_steps: expected an integer, got 'three'"),
    ("type: RLX\n", ":1:1: spec.type: 'RLX' is not one of RL, SFT, INFERENCE"),
    ("type: RL\n  bad: [\n", ":2:6: not valid YAML: mapping values are not allowed here"),
    ("type: RL\nagents:\n  - agent_id: a\n  - {agent_idd: b}\n", ":4:6: spec.agents[1].agent_idd: unknown field"),
    ("- 1\n", ": spec: expected a mapping of spec fields, got list"),
    ("", ": the file is empty"),
])
def test_a_bad_spec_points_at_its_line_and_exits_2_before_calling_anyone(tmp_path, capsys, text, expected):
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    for command in ("run", "submit"):
        assert main([command, str(spec), "--scheduler", NOBODY]) == exit_codes.BAD_INPUT
        err = capsys.readouterr().err
        assert err == f"error: invalid job spec: {spec}{expected}" + err[len(f"error: invalid job spec: {spec}{expected}"):]
        assert "cannot reach" not in err and err.count("\n") == 1


def test_a_missing_spec_file_is_bad_input(tmp_path, capsys):
    assert main(["submit", str(tmp_path / "nope.yaml"), "--scheduler", NOBODY]) == exit_codes.BAD_INPUT
    assert "No such file or directory" in capsys.readouterr().err


def test_usage_errors_exit_2():
    result = cli("jobs", "frobnicate")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_logs_needs_a_job_or_a_service(capsys, tmp_path):
    assert main(["logs", "--scheduler", NOBODY]) == exit_codes.BAD_INPUT
    assert "name a job" in capsys.readouterr().err
    assert main(["logs", "--service", "trainer", "--state-dir", str(tmp_path)]) == exit_codes.UNREACHABLE
    assert "no stack recorded" in capsys.readouterr().err


def test_bash_completion_knows_commands_subcommands_flags_and_values():
    script = cli("completion", "bash").stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in words)
        probe = f'{script}\nCOMP_WORDS=(opentinker {line}); COMP_CWORD={len(words)}; _opentinker; echo "${{COMPREPLY[@]}}"'
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()

    assert complete("jo") == ["jobs"]
    assert complete("jobs", "") == ["artifacts", "cancel", "get", "list", "metrics", "samples"]
    assert complete("jobs", "metrics", "j1", "--format", "") == ["table", "csv", "jsonl"]
    assert "--role" in complete("workers", "--")
    assert complete("admin", "keys", "re") == ["revoke"]
    assert complete("completion", "") == ["bash", "zsh"]


def test_zsh_completion_loads_bash_completion_support():
    script = cli("completion", "zsh").stdout
    assert script.splitlines()[1] == "autoload -U +X bashcompinit && bashcompinit"
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-c", script], capture_output=True).returncode == 0


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def metrics_event(step: int, **values: float) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(metrics=job_pb2.MetricsReported(step=step, values=values))


def progress_event(step: int, total: int) -> job_pb2.JobEvent:
    return job_pb2.JobEvent(progress=job_pb2.ProgressUpdated(progress=progress_pb2.JobProgress(
        phase=progress_pb2.PHASE_ROLLOUT, step=step, total_steps=total)))


def test_the_live_view_redraws_the_bar_and_a_metrics_table_in_place():
    screen = FakeTerminal()
    view = JobProgressView(screen)
    view.on_event(progress_event(1, 4))
    view.on_event(metrics_event(1, **{"reward/mean": 0.1, "loss": 0.5}))
    view.on_event(metrics_event(2, **{"reward/mean": 0.4, "loss": 0.3}))
    view.on_event(job_pb2.JobEvent(log=job_pb2.LogLine(source="coordinator", message="eval done")))
    view.close()
    text = screen.getvalue()
    # the block (bar + header + 2 metric rows) is erased before each redraw: 3 cursor-ups
    assert "\x1b[1A\x1b[2K" * 3 in text
    final_block = text.rsplit("eval done\n", 1)[1]
    lines = final_block.strip().splitlines()
    assert lines[0].startswith("[######..................] step 1/4 ROLLOUT") and "reward=0.400" in lines[0]
    assert lines[1].split() == ["metric", "latest", "min", "max", "curve"]
    assert lines[2].split()[:4] == ["reward/mean", "0.4", "0.1", "0.4"]
    assert lines[3].split()[:4] == ["loss", "0.3", "0.3", "0.5"]


def test_a_pipe_gets_one_line_per_event_and_the_table_at_the_end():
    out = io.StringIO()
    view = JobProgressView(out)
    view.on_event(metrics_event(1, **{"reward/mean": 0.2}))
    view.on_event(metrics_event(2, **{"reward/mean": 0.6}))
    view.close()
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue() and len(lines) == 4
    assert lines[2].split()[0] == "metric" and lines[3].split()[:4] == ["reward/mean", "0.6", "0.2", "0.6"]


@pytest.mark.parametrize("flag", ["--tensorboard", "--wandb"])
def test_run_with_a_logger_it_cannot_start_submits_nothing(flag, tmp_path, monkeypatch, capsys):
    """The logger starts before the job is submitted: the unreachable scheduler is never called."""
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    monkeypatch.setitem(sys.modules, "wandb", None)
    spec = tmp_path / "job.yaml"
    spec.write_text("type: RL\ntraining: {total_steps: 2}\n")
    assert main(["run", str(spec), flag, str(tmp_path / "tb"), "--scheduler", NOBODY]) == exit_codes.BAD_INPUT
    err = capsys.readouterr().err
    assert "pip install" in err and "nothing was submitted" in err and "cannot reach" not in err


def test_no_wandb_run_starts_for_a_job_the_scheduler_cannot_take(tmp_path, monkeypatch, capsys):
    """The Scheduler checks the spec before the W&B run starts: unreachable, nothing starts."""
    import types

    started = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kwargs: started.append(kwargs)))
    spec = tmp_path / "job.yaml"
    spec.write_text("type: RL\ntraining: {total_steps: 2}\n")
    assert main(["run", str(spec), "--wandb", "p", "--scheduler", NOBODY]) == exit_codes.UNREACHABLE
    assert started == [] and "cannot reach" in capsys.readouterr().err


def test_the_workers_table_says_which_bases_lora_jobs_share():
    from opentinker_api.scheduler.v1 import worker_pb2
    from opentinker.cli.workers import shared_bases

    worker = worker_pb2.Worker(resident_models=[
        worker_pb2.ResidentModel(device_id="cpu:0", model_key="builtin:tiny-llama@0/default", job_ids=["a", "b"]),
        worker_pb2.ResidentModel(device_id="cpu:1", model_key="local:/m/default", job_ids=["c"])])
    assert shared_bases(worker) == "builtin:tiny-llama@0/default on cpu:0: 2 jobs; local:/m/default on cpu:1: 1 job"
    assert shared_bases(worker_pb2.Worker()) == "-"
