"""API keys on the real local stack: `opentinker admin` manages tenants and keys, tenants are
isolated, and the service key never shows in process arguments or service logs."""

from __future__ import annotations

import json
from pathlib import Path

from harness.stack import LocalStack
from tests.e2e._helpers import cli


def test_admin_cli_creates_tenants_whose_keys_see_only_their_own_jobs(stack: LocalStack, tmp_path: Path) -> None:
    created = cli(stack, stack.api_key, "admin", "tenants", "create", "acme", "--max-queued-jobs", "5")
    assert created.returncode == 0, created.stderr
    acme_key = created.stdout.strip()
    assert acme_key.startswith("otk_") and "shown only now" in created.stderr
    other_key = cli(stack, stack.api_key, "admin", "tenants", "create", "globex").stdout.strip()

    spec = tmp_path / "job.yaml"
    spec.write_text("type: SFT\npolicy: {model: {builtin: {name: tiny-llama}}, adaptation: {full: {}},\n"
                    "  algorithm: {optimizer: {learning_rate: 0.001}}}\ndataset: {path: nonexistent.jsonl}\n"
                    "training: {total_steps: 1, batch_size: 1}\npriority: 1\n")
    submitted = cli(stack, acme_key, "submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split()[-1]
    assert cli(stack, acme_key, "jobs", "get", job_id).returncode == 0
    hidden = cli(stack, other_key, "jobs", "get", job_id)
    assert hidden.returncode != 0 and f"job {job_id} not found" in hidden.stderr
    listed = cli(stack, other_key, "jobs", "list", "--json")
    assert job_id not in listed.stdout

    denied = cli(stack, acme_key, "admin", "keys", "create", "acme", "--admin")
    assert denied.returncode == 4 and "PERMISSION_DENIED" in denied.stderr
    keys = json.loads(cli(stack, stack.api_key, "admin", "keys", "list", "acme", "--json").stdout)
    assert len(keys) == 1 and keys[0]["key_id"] == acme_key.split("_")[1] and "secret" not in json.dumps(keys)
    revoked = cli(stack, stack.api_key, "admin", "keys", "revoke", keys[0]["key_id"])
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    nobody = cli(stack, "", "jobs", "list")
    assert nobody.returncode != 0 and "API key" in nobody.stderr, nobody.stderr


def test_the_service_key_is_in_no_process_arguments_and_no_log(stack: LocalStack) -> None:
    record = json.loads((stack.state_dir / "stack.json").read_text())
    secret = stack.api_key.split("_", 2)[2]
    for process in record["processes"]:
        cmdline = Path(f"/proc/{process['pid']}/cmdline").read_bytes().decode(errors="replace")
        assert secret not in cmdline, process["name"]
    logs = "".join(p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob("*.log"))
    assert "service_key_installed" in logs  # the scheduler says which key it installed, by id
    assert secret not in logs
