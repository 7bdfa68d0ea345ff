"""Every job, log, worker and admin command of the CLI against the live stack (in process:
`main(argv)` with the real gRPC calls), with --json where the command reads."""

from __future__ import annotations

import csv
import json
import time

import pytest

from opentinker.cli import exit_codes
from opentinker.cli.api import default_scheduler
from opentinker.cli.main import main
from harness.job_specs import rl_spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def opentinker(stack, capsys):
    """opentinker(*argv) -> (exit code, stdout, stderr), aimed at the stack's scheduler."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--scheduler", stack.address("scheduler")])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def write_spec(tmp_path, spec: dict) -> str:
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def test_run_watches_to_the_end_then_metrics_export_in_every_format(opentinker, tmp_path):
    code, out, err = opentinker("run", write_spec(tmp_path, rl_spec(total_steps=3)))
    assert code == exit_codes.OK, err
    job_id = err.split("submitted job ", 1)[1].split()[0]
    assert out.strip() == f"job {job_id} SUCCEEDED: finished: succeeded" or out.startswith(f"job {job_id} SUCCEEDED")
    assert "step 3/3" in err and "reward/mean" in err  # the progress lines, then the metrics table

    code, out, _ = opentinker("jobs", "metrics", job_id)
    rows = out.strip().splitlines()
    # step 0 is the evaluation before any training; steps 1-3 train
    assert code == 0 and rows[0].split()[:2] == ["STEP", "reward/mean"]
    assert [r.split()[0] for r in rows[2:]] == ["0", "1", "2", "3"]

    target = tmp_path / "m.csv"
    code, _, err = opentinker("jobs", "metrics", job_id, "--format", "csv", "-o", str(target),
                              "--plot", str(tmp_path / "curves.png"))
    table = list(csv.DictReader(target.open()))
    assert code == 0 and [row["step"] for row in table] == ["0", "1", "2", "3"]
    assert [k for k, v in table[0].items() if k.startswith("eval/") and v] and not table[0]["loss"]
    assert all(float(row["reward/mean"]) >= 0 and row["loss"] for row in table[1:])
    assert (tmp_path / "curves.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "curves.png").stat().st_size > 5_000

    code, out, _ = opentinker("jobs", "metrics", job_id, "--format", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2, 3] and all("reward/mean" in line for line in lines[1:])


def test_watch_sends_a_finished_jobs_metrics_to_a_wandb_run_named_after_it(opentinker, tmp_path, monkeypatch):
    import sys
    import types

    code, out, _ = opentinker("submit", write_spec(tmp_path, rl_spec(total_steps=2)))
    job_id = out.strip()
    runs: list[dict] = []

    def init(**kwargs):
        runs.append({"init": kwargs, "logged": [], "tables": [], "finished": False})

        def log(values, step):
            runs[-1]["logged"].append(step)
            runs[-1]["tables"] += [(step, key, len(value[1])) for key, value in values.items() if key.startswith("samples/")]
        return types.SimpleNamespace(name=kwargs.get("name"), log=log, finish=lambda: runs[-1].update(finished=True))
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init, Table=lambda columns, data: (columns, data)))
    code, _, err = opentinker("watch", job_id, "--wandb", "proj")
    assert code == exit_codes.OK, err
    [run] = runs
    assert run["init"]["project"] == "proj" and run["init"]["name"] == "e2e"  # the spec's display name
    assert run["init"]["config"]["training"]["total_steps"] == 2 and run["init"]["config"]["type"] == "JOB_TYPE_RL"
    assert sorted(set(run["logged"])) == [0, 1, 2] and run["finished"]
    # each step's samples as a table: the two training batches and the evaluations at steps 0 and 2
    assert {(step, key) for step, key, _ in run["tables"]} == {
        (1, "samples/train"), (2, "samples/train"), (0, "samples/eval"), (2, "samples/eval")}
    assert all(1 <= rows <= 4 for _, _, rows in run["tables"])


def test_submit_get_list_logs_and_watch_json(opentinker, tmp_path):
    code, out, _ = opentinker("submit", write_spec(tmp_path, rl_spec(total_steps=1)))
    job_id = out.strip()
    assert code == 0 and job_id.startswith("job-")

    code, out, _ = opentinker("watch", job_id, "--json")
    assert code == 0 and json.loads(out)["state"] == "STATE_SUCCEEDED"

    code, out, _ = opentinker("jobs", "get", job_id)
    assert code == 0 and f"job      {job_id}" in out and "state    SUCCEEDED" in out
    code, out, _ = opentinker("jobs", "get", job_id, "--json")
    assert json.loads(out)["job_id"] == job_id

    code, out, _ = opentinker("jobs", "list", "--state", "SUCCEEDED", "--limit", "2", "--json")
    listed = json.loads(out)
    assert code == 0 and 1 <= len(listed) <= 2 and all(j["state"] == "STATE_SUCCEEDED" for j in listed)
    code, out, _ = opentinker("jobs", "list", "--state", "QUEUED", "--state", "ALLOCATING")
    assert job_id not in out

    code, out, _ = opentinker("logs", job_id)
    states = [line.split("STATE", 1)[1].strip() for line in out.splitlines() if " STATE " in line]
    assert code == 0 and states[0] == "QUEUED: submitted" and states[1].startswith("QUEUED -> ALLOCATING")
    assert states[-1].startswith("RUNNING -> SUCCEEDED")
    steps = [line.split("METRICS ", 1)[1] for line in out.splitlines() if " METRICS " in line]
    assert [line.split(":")[0] for line in steps] == ["step 0", "step 1", "step 1"]  # eval, the step, the final eval
    assert "reward/mean=" in steps[1] and "loss=" in steps[1] and "eval/reward/mean=" in steps[0]
    assert any(" CKPT    step 1: " in line and line.endswith("-final") for line in out.splitlines())
    code, out, _ = opentinker("logs", job_id, "--json")
    kinds = [next(iter(set(json.loads(line)) & {"state_changed", "log", "metrics", "checkpoint", "worker_lost"}))
             for line in out.splitlines()]
    assert "progress" not in out and {"state_changed", "metrics", "checkpoint"} <= set(kinds)

    code, _, err = opentinker("jobs", "cancel", job_id)  # it already succeeded
    assert code == exit_codes.CONFLICT and "FAILED_PRECONDITION" in err and "already ended" in err


def test_cancel_waits_for_a_running_job_to_stop_and_is_idempotent(opentinker, stack, tmp_path):
    code, out, _ = opentinker("submit", write_spec(tmp_path, rl_spec(total_steps=200)))
    job_id = out.strip()
    deadline = time.monotonic() + 60
    while "RUNNING" not in opentinker("jobs", "get", job_id)[1] and time.monotonic() < deadline:
        time.sleep(0.3)
    code, out, err = opentinker("jobs", "cancel", job_id, "--reason", "enough")
    assert code == 0 and out.startswith(f"job {job_id} CANCELLED"), out + err
    code, out, _ = opentinker("jobs", "cancel", job_id, "--json")
    assert code == 0 and json.loads(out)["state"] == "STATE_CANCELLED"
    code, _, err = opentinker("watch", job_id)  # a cancelled job's watch ends, exit 1
    assert code == exit_codes.FAILED


def test_unknown_ids_exit_5_and_the_schedulers_refusal_points_at_the_line(opentinker, tmp_path):
    code, _, err = opentinker("jobs", "get", "job-nope")
    assert code == exit_codes.NOT_FOUND and err.startswith("error: NOT_FOUND: ")
    spec = rl_spec(total_steps=1)
    spec["policy"]["algorithm"]["optimizer"]["learning_rate"] = 0
    path = write_spec(tmp_path, spec)
    code, _, err = opentinker("run", path)
    line = next(n for n, text in enumerate(open(path), 1) if "learning_rate" in text)
    assert code == exit_codes.BAD_INPUT
    assert f"{path}:{line}:" in err and "spec.policy.algorithm.optimizer.learning_rate: must be > 0" in err


def test_workers_show_every_role_and_the_leases_of_a_running_job(opentinker):
    code, out, _ = opentinker("workers", "--json")
    workers = json.loads(out)
    assert code == 0 and {w["role"] for w in workers} >= {"ROLE_TRAINER", "ROLE_ROLLOUT", "ROLE_ENVHOST",
                                                           "ROLE_COORDINATOR"}
    code, out, _ = opentinker("workers", "--role", "trainer")
    rows = out.strip().splitlines()
    assert rows[0].split()[:3] == ["WORKER", "ROLE", "STATE"] and all(" trainer " in r for r in rows[2:])


def test_admin_tenants_get_list_and_quota(opentinker):
    code, _, err = opentinker("admin", "tenants", "create", "cli-co", "--max-queued-jobs", "3")
    assert code == 0, err
    code, out, _ = opentinker("admin", "tenants", "get", "cli-co")
    assert code == 0 and out.splitlines()[2].split() == ["cli-co", "0/-", "0/-", "0/3"]
    code, out, _ = opentinker("admin", "quota", "cli-co", "--max-devices", "2", "--json")
    assert json.loads(out)[0]["quota"]["max_devices"] == 2
    code, out, _ = opentinker("admin", "tenants", "list", "--json")
    assert "cli-co" in {t["tenant_id"] for t in json.loads(out)}
    code, _, err = opentinker("admin", "tenants", "create", "cli-co")
    assert code == exit_codes.CONFLICT and "tenant cli-co already exists" in err


def test_service_logs_come_from_the_local_stack(stack, capsys):
    assert main(["logs", "--service", "scheduler", "-n", "3", "--state-dir", str(stack.state_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(json.loads(line)["service"] == "scheduler" for line in lines)
    assert default_scheduler(stack.state_dir) == stack.address("scheduler")


def test_run_with_wandb_starts_a_run_only_for_a_job_the_scheduler_accepts(opentinker, scheduler, tmp_path, monkeypatch):
    import sys
    import types

    started = []

    def failing_init(**kwargs):
        started.append(kwargs)
        raise RuntimeError("api_key not configured (no-tty)")
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=failing_init))
    before = len(list(scheduler.list_jobs()))
    refused = write_spec(tmp_path, {**rl_spec(total_steps=1), "environment": {"env_name": "no-such-game"}})
    code, _, err = opentinker("run", refused, "--wandb", "proj")
    assert code == exit_codes.BAD_INPUT and "no-such-game" in err and started == []  # refused before W&B started
    code, _, err = opentinker("run", write_spec(tmp_path, rl_spec(total_steps=1)), "--wandb", "proj")
    assert code == exit_codes.BAD_INPUT and "api_key not configured" in err and "nothing was submitted" in err
    assert len(started) == 1 and len(list(scheduler.list_jobs())) == before  # the login failed: nothing submitted
