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


def test_the_progress_line_shows_each_agent_of_a_multi_agent_job():
    import io

    from opentinker_api.scheduler.v1 import job_pb2
    from opentinker.cli.progress import JobProgressView

    out = io.StringIO()
    view = JobProgressView(out)
    view.on_event(job_pb2.JobEvent(metrics=job_pb2.MetricsReported(
        step=1, agent_id="alpha", values={"elo": 1008.4, "match/win_rate": 0.75, "reward/mean": 0.5})))
    view.on_event(job_pb2.JobEvent(metrics=job_pb2.MetricsReported(
        step=1, agent_id="beta", values={"elo": 991.6, "match/win_rate": 0.25, "match/invalid_move_rate": 0.1})))
    last = out.getvalue().splitlines()[-1]
    assert "| alpha elo=1008 win=0.75" in last and "| beta elo=992 win=0.25 invalid=0.10" in last
    assert "reward=" not in last  # an agent's reward is not shown as the job's
