"""The JSON endpoints: read the request's parameters, call the Scheduler, shape the answer.

Each function takes the gateway, the caller's API key and the request's parameters and returns
a JSON-able dict, or raises ApiError (which the HTTP layer turns into a status and a body).
"""

from __future__ import annotations

import uuid
from typing import Any

from opentinker.dashboard.errors import bad_request, not_found
from opentinker.dashboard.gateway import SchedulerGateway
from opentinker.dashboard.metrics import metric_series
from opentinker.dashboard.views import Json, artifact_view, job_view, samples_view, tenant_view, worker_view

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
MAX_REASON_CHARS = 500


def int_param(query: dict[str, str], name: str, *, default: int, low: int, high: int) -> int:
    raw = query.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_request(f"{name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise bad_request(f"{name} must be in {low}..{high}, got {value}")
    return value


def list_jobs(gateway: SchedulerGateway, api_key: str, query: dict[str, str]) -> Json:
    page_size = int_param(query, "page_size", default=DEFAULT_PAGE_SIZE, low=1, high=MAX_PAGE_SIZE)
    response = gateway.list_jobs(api_key, page_size=page_size, page_token=query.get("page_token", ""))
    return {"jobs": [job_view(job) for job in response.jobs], "next_page_token": response.next_page_token}


def get_job(gateway: SchedulerGateway, api_key: str, job_id: str) -> Json:
    return {"job": job_view(gateway.get_job(api_key, job_id))}


def job_metrics(gateway: SchedulerGateway, api_key: str, job_id: str) -> Json:
    """Every metric reported so far; `last_sequence` is where a live stream should resume."""
    job = gateway.get_job(api_key, job_id)
    events = gateway.events_until(api_key, job_id, job.last_event_sequence)
    return {"job_id": job_id, "last_sequence": events[-1].sequence if events else 0,
            "series": metric_series(events)}


SAMPLE_SPLITS = ("", "train", "eval", "inference")
MAX_STEP = 10**9


def job_samples(gateway: SchedulerGateway, api_key: str, job_id: str, query: dict[str, str]) -> Json:
    """The samples of one step (`step`, default the latest; `split` narrows them) and `steps`,
    every step that has samples (newest first), for choosing one."""
    split = query.get("split", "")
    if split not in SAMPLE_SPLITS:
        raise bad_request(f"split must be one of train, eval, inference, got {split!r}")
    asked = int_param(query, "step", default=-1, low=0, high=MAX_STEP)
    every = gateway.list_samples(api_key, job_id, split=split, page_size=200)
    steps = sorted({s.step for s in every}, reverse=True)
    shown = asked if asked >= 0 else (steps[0] if steps else -1)
    return {"job_id": job_id, "steps": steps, "step": shown,
            "samples": [samples_view(s) for s in every if s.step == shown]}


def job_artifacts(gateway: SchedulerGateway, api_key: str, job_id: str) -> Json:
    return {"job_id": job_id, "artifacts": [artifact_view(a) for a in gateway.list_artifacts(api_key, job_id)]}


def artifact_files(gateway: SchedulerGateway, api_key: str, artifact_id: str, prefix: str) -> list:
    """The files a download of `artifact_id` (under `prefix`) will send; ApiError before anything
    is sent: 400 for a malformed id, 404 for another tenant's or a missing one or directory."""
    job_id = artifact_id.split("/", 1)[0] if "/" in artifact_id else artifact_id[:len("job-") + 32]
    if not artifact_id or not job_id.startswith("job-"):
        raise bad_request("id must be an artifact id (a checkpoint id or <job_id>/<file>; see the job's Artifacts)")
    artifact = next((a for a in gateway.list_artifacts(api_key, job_id) if a.artifact_id == artifact_id), None)
    if artifact is None:
        raise not_found(f"artifact {artifact_id} not found")
    files = [f for f in artifact.files if not prefix or f.path == prefix or f.path.startswith(f"{prefix}/")]
    if not files:
        raise not_found(f"artifact {artifact_id} has no files under {prefix!r}")
    return files


def cancel_job(gateway: SchedulerGateway, api_key: str, job_id: str, body: Any) -> Json:
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
        raise bad_request(f"reason must be a string of at most {MAX_REASON_CHARS} characters")
    job = gateway.cancel_job(api_key, job_id, request_id=str(uuid.uuid4()),
                             reason=reason or "cancelled from the dashboard")
    return {"job": job_view(job)}


def list_workers(gateway: SchedulerGateway, api_key: str) -> Json:
    return {"workers": [worker_view(worker) for worker in gateway.list_workers(api_key)]}


def list_tenants(gateway: SchedulerGateway, api_key: str) -> Json:
    return {"tenants": [tenant_view(tenant) for tenant in gateway.list_tenants(api_key)]}
