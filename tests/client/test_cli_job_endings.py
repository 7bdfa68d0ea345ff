"""What the CLI says when a job ends: its state by name, and the checkpoint to train from next
(what a user chains SFT into RL with), without `jobs get --json`. Against a scripted
SchedulerService on a real gRPC server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.cli.main import main
from tests.client._fake_scheduler import Story, fake_scheduler, final_checkpoint

SPEC = """type: SFT
display_name: warm-up
policy:
  model: {builtin: {name: tiny-llama, seed: 1}}
  adaptation: {full: {}}
  algorithm: {optimizer: {learning_rate: 0.001}}
dataset: {path: sft.jsonl}
training: {total_steps: 20, batch_size: 4}
"""


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no ./.opentinker here: every command gets --scheduler
    monkeypatch.delenv("OPENTINKER_SCHEDULER", raising=False)
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    return path


def test_run_prints_the_final_checkpoint_and_how_to_train_from_it(spec_file: Path, capsys) -> None:  # noqa: ANN001
    def story(job_id: str) -> Story:
        return Story(checkpoints=[job_pb2.CheckpointSaved(checkpoint_id=f"{job_id}-step-10", step=10),
                                  final_checkpoint(job_id, 20)])

    with fake_scheduler(story) as (_, address):
        assert main(["run", str(spec_file), "--scheduler", address]) == 0
    out = capsys.readouterr().out
    job_id = re.search(r"^job (job-[0-9a-f]{32}) SUCCEEDED: finished$", out, re.MULTILINE).group(1)
    assert f"\nfinal checkpoint: {job_id}-final (step 20)\n" in out
    assert f"\n  policy: {{model: {{checkpoint: {{checkpoint_id: {job_id}-final}}}}}}\n" in out
    assert f"{job_id}-step-10" not in out


def test_a_multi_agent_job_prints_each_agents_checkpoint(spec_file: Path, capsys) -> None:  # noqa: ANN001
    story = lambda job_id: Story(checkpoints=[final_checkpoint(  # noqa: E731
        job_id, 50, alpha=f"{job_id}-final-alpha", beta=f"{job_id}-final-beta")])
    with fake_scheduler(story) as (_, address):
        assert main(["run", str(spec_file), "--scheduler", address]) == 0
    out = capsys.readouterr().out
    job_id = re.search(r"^job (job-\S+) SUCCEEDED", out, re.MULTILINE).group(1)
    assert f"final checkpoint of agent alpha: {job_id}-final-alpha (step 50)\n" in out
    assert f"final checkpoint of agent beta: {job_id}-final-beta (step 50)\n" in out


def test_a_failed_job_shows_its_last_checkpoint_a_job_without_one_none(spec_file: Path, capsys) -> None:  # noqa: ANN001
    failed = lambda job_id: Story(final_state=job_pb2.Job.STATE_FAILED, message="NoTrainableEpisodes",  # noqa: E731
                                  checkpoints=[job_pb2.CheckpointSaved(checkpoint_id=f"{job_id}-step-5", step=5)])
    with fake_scheduler(failed) as (_, address):
        assert main(["run", str(spec_file), "--scheduler", address]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^last checkpoint: job-\S+-step-5 \(step 5\)$", out, re.MULTILINE), out
    with fake_scheduler() as (_, address):
        assert main(["run", str(spec_file), "--scheduler", address]) == 0
    assert "checkpoint" not in capsys.readouterr().out


def test_watch_and_jobs_get_show_the_checkpoint_too(spec_file: Path, capsys) -> None:  # noqa: ANN001
    with fake_scheduler(lambda job_id: Story(checkpoints=[final_checkpoint(job_id, 20)])) as (_, address):
        assert main(["submit", str(spec_file), "--scheduler", address]) == 0
        job_id = capsys.readouterr().out.strip()
        assert main(["watch", job_id, "--scheduler", address]) == 0
        assert f"final checkpoint: {job_id}-final (step 20)\n" in capsys.readouterr().out
        assert main(["jobs", "get", job_id, "--scheduler", address]) == 0
        got = capsys.readouterr().out
    assert f"\nfinal checkpoint: {job_id}-final (step 20)\n" in got
    assert re.search(r"^state +SUCCEEDED$", got, re.MULTILINE), got


def test_the_cli_names_job_states_never_their_numbers(spec_file: Path, capsys) -> None:  # noqa: ANN001
    with fake_scheduler() as (fake, address):
        fake.add_job(job_pb2.Job(job_id="job-running", state=job_pb2.Job.STATE_RUNNING,
                                 spec=job_pb2.JobSpec(type=job_pb2.JOB_TYPE_RL)))
        assert main(["jobs", "list", "--scheduler", address]) == 0
        listing = capsys.readouterr().out
        assert main(["jobs", "get", "job-running", "--scheduler", address]) == 0
        got = capsys.readouterr().out
    row = next(line for line in listing.splitlines() if line.startswith("job-running"))
    assert row.split()[1:3] == ["RL", "RUNNING"], listing
    assert re.search(r"^state +RUNNING$", got, re.MULTILINE), got


def test_jobs_list_and_get_name_a_session_job(capsys) -> None:  # noqa: ANN001
    with fake_scheduler() as (fake, address):
        fake.add_job(job_pb2.Job(job_id="job-session", state=job_pb2.Job.STATE_RUNNING,
                                 spec=job_pb2.JobSpec(type=job_pb2.JOB_TYPE_SESSION)))
        assert main(["jobs", "list", "--scheduler", address]) == 0
        listing = capsys.readouterr().out
        assert main(["jobs", "get", "job-session", "--scheduler", address]) == 0
        got = capsys.readouterr().out
    row = next(line for line in listing.splitlines() if line.startswith("job-session"))
    assert row.split()[1:3] == ["SESSION", "RUNNING"], listing
    assert re.search(r"^type +SESSION$", got, re.MULTILINE), got


def test_workers_role_filter_offers_gateway() -> None:
    from opentinker.cli.workers import ROLES

    assert ROLES == ["trainer", "rollout", "envhost", "coordinator", "gateway"]
