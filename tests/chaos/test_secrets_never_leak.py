"""Secrets never leak: the live stack (auth on, every link mutual TLS) runs a tenant's job with a job token in play, then
every place a secret could end up is searched for every secret.

Secrets: the stack's admin (service) key, the tenant's key, the job's token (captured from an
admin GetJob while the job runs), each whole and each secret part. Searched: every file under
the stack's state dir but admin.key (service logs, stack.json, Redis's append-only file, the
checkpoints), every event of the job, the argv of every stack process and its children, every
Prometheus /metrics page, and the dashboard's page and JSON API. The test first checks that each
secret is where it legitimately is (admin.key, the tenant's own key, the token's hash in Redis,
the key ids in the logs), so it cannot pass by finding nothing at all.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from opentinker_runtime.auth.api_keys import parse_api_key
from opentinker_runtime.auth.job_tokens import HASH_FIELD, JOB_TOKEN_PATTERN, hash_job_token, job_token_of
from opentinker_runtime.core.redis_store import Keys
from harness.job_specs import rl_spec
from harness.stack import LocalStack
from tests.chaos._tls_security_stack import assert_tls_only, tls_admin, tls_stack  # noqa: F401 - fixtures `stack`, `admin` over mutual TLS

pytestmark = pytest.mark.timeout(180)
TENANT = "secrets-tenant"
LEGITIMATE_FILES = ("admin.key",)
"""Files under the state dir that hold a secret by design (mode 0600)."""


def secret_forms(text: str) -> list[str]:
    """A secret whole and, for an API key, its secret part (the id is public)."""
    return [text, parse_api_key(text)[1]] if text.startswith("otk_") else [text]


def running_job_token(admin: SchedulerClient, job_id: str) -> job_pb2.Job:
    """The job (as an admin sees it, token included) once it has trained a step."""
    for event in admin.watch_job(job_id):
        if event.WhichOneof("payload") == "metrics":
            return admin.get_job(job_id)
    raise AssertionError(f"job {job_id} ended before training: {admin.get_job(job_id).status_message}")


def stack_pids(stack: LocalStack) -> set[int]:
    """Every process of the stack and, transitively, their children (trainer replicas, sandboxes)."""
    pids = {p["pid"] for p in stack.status["processes"] if p.get("pid")}
    parents = {int(d.name): int(Path(f"/proc/{d.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
               for d in Path("/proc").iterdir() if d.name.isdigit() and _readable(d / "stat")}
    while grown := {pid for pid, parent in parents.items() if parent in pids} - pids:
        pids |= grown
    return pids


def _readable(path: Path) -> bool:
    try:
        path.read_text()
        return True
    except OSError:
        return False


def process_arguments(stack: LocalStack) -> dict[str, str]:
    args = {}
    for pid in stack_pids(stack):
        try:
            args[f"argv of pid {pid}"] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # exited meanwhile
    return args


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode(errors="replace")


def dashboard_pages(stack: LocalStack, job_id: str, *, ended: bool) -> dict[str, str]:
    """What the dashboard (acting with the stack's admin key) serves about the job."""
    paths = ["/", "/static/app.js", "/api/jobs", f"/api/jobs/{job_id}", "/api/workers", "/api/tenants"]
    if ended:  # its event stream then ends by itself
        paths += [f"/api/jobs/{job_id}/metrics", f"/api/jobs/{job_id}/events"]
    pages = {}
    for path in paths:
        try:
            pages[f"dashboard {path}"] = http_get(stack.dashboard_url + path)
        except urllib.error.HTTPError as error:
            assert error.code == 404 and path.startswith("/static/"), (path, error.code)
    return pages


def state_files(stack: LocalStack) -> dict[str, str]:
    files = {}
    for path in sorted(p for p in stack.state_dir.rglob("*") if p.is_file()):
        if path.name not in LEGITIMATE_FILES:
            files[str(path.relative_to(stack.state_dir))] = path.read_bytes().decode("latin-1")
    return files


def metrics_pages(stack: LocalStack) -> dict[str, str]:
    return {f"metrics of {p['name']}": http_get(p["metrics_url"])
            for p in stack.status["processes"] if p.get("metrics_url")}


def test_no_secret_reaches_logs_events_files_argv_metrics_or_the_dashboard(stack: LocalStack,
                                                                           admin: SchedulerClient) -> None:
    assert_tls_only(stack)
    tenant_key = admin.create_tenant(TENANT).api_key_secret
    with SchedulerClient(stack.address("scheduler"), api_key=tenant_key) as tenant:
        submitted = tenant.submit_job(rl_spec(total_steps=3))
        running = running_job_token(admin, submitted.job_id)
        token = job_token_of(running)
        seen = {**dashboard_pages(stack, submitted.job_id, ended=False), **process_arguments(stack)}
        final = tenant.wait(submitted.job_id)
        events = "\n".join(map(str, tenant.read_events(submitted.job_id)))
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, final.status_message
    assert JOB_TOKEN_PATTERN.match(token) and final.tenant_id == TENANT
    assert_found_where_they_belong(stack, tenant_key, token, submitted.job_id)

    seen |= {"events of the job": events, "stack.json": json.dumps(stack.status), **state_files(stack),
             **metrics_pages(stack), **dashboard_pages(stack, submitted.job_id, ended=True)}
    assert {"logs/scheduler.log", "logs/trainer.log", "logs/rollout.log", "logs/coordinator.log",
            "logs/envhost.log", "redis/appendonly.aof"} <= set(seen)
    secrets = [form for secret in (stack.api_key, tenant_key, token) for form in secret_forms(secret)]
    leaks = sorted({(where, secret[:12] + "...") for where, text in seen.items() for secret in secrets
                    if secret in text})
    assert leaks == []


def assert_found_where_they_belong(stack: LocalStack, tenant_key: str, token: str, job_id: str) -> None:
    """The search below is real: each secret is present where it belongs, and the logs talk
    about the keys by their public ids."""
    assert (stack.state_dir / "admin.key").read_text().strip() == stack.api_key
    assert oct((stack.state_dir / "admin.key").stat().st_mode & 0o777) == "0o600"
    client = redis.Redis(port=stack.redis_port)
    try:
        assert client.hget(Keys().job(job_id), HASH_FIELD).decode() == hash_job_token(token)
        assert client.hget(Keys().api_key(parse_api_key(tenant_key)[0]), "tenant_id") == TENANT.encode()
    finally:
        client.close()
    logs = "".join(p.read_text(errors="replace") for p in (stack.state_dir / "logs").glob("*.log"))
    assert parse_api_key(stack.api_key)[0] in logs and job_id in logs
