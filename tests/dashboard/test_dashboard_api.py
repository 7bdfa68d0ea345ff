"""The dashboard's JSON API and event streams against a live stack, without a browser."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import SchedulerClient
from harness.stack import LocalStack
from tests.dashboard._dashboard import DashboardProcess, EventStreamReader, connection, get, request
from tests.dashboard._jobs import create_tenant, tiny_rl_spec

BAD_KEY = {"Authorization": "Bearer otk_0123456789abcdef_notavalidsecret"}


@pytest.fixture(scope="module")
def finished_job(dashboard: DashboardProcess, scheduler: SchedulerClient) -> dict:
    """A two-step job followed live through the dashboard's stream from submission to the end."""
    job = scheduler.submit_job(tiny_rl_spec(total_steps=2, name="api-test"))
    reader = EventStreamReader(dashboard.url, f"/api/jobs/{job.job_id}/events")
    try:
        frames = reader.frames_until_end()
    finally:
        reader.close()
    return {"job_id": job.job_id, "frames": frames, "events": list(scheduler.watch_job(job.job_id))}


@pytest.fixture(scope="module")
def running_job(scheduler: SchedulerClient, finished_job: dict) -> Iterator[str]:
    """A long job, RUNNING (it holds leases) until the module's tests are done."""
    job = scheduler.submit_job(tiny_rl_spec(total_steps=100000, name="lease-holder"))
    try:
        deadline = time.monotonic() + 60
        while scheduler.get_job(job.job_id).state != job_pb2.Job.STATE_RUNNING:
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.2)
        yield job.job_id
    finally:
        scheduler.cancel_job(job.job_id)


def test_unknown_job_is_a_404_with_a_json_body(dashboard: DashboardProcess):
    for path in ("/api/jobs/job-does-not-exist", "/api/jobs/job-does-not-exist/metrics",
                 "/api/jobs/job-does-not-exist/events"):
        status, body = get(dashboard.url, path)
        assert status == 404, path
        assert body["code"] == "NOT_FOUND" and "job-does-not-exist" in body["message"], body
    status, body = request(dashboard.url, "POST", "/api/jobs/job-does-not-exist/cancel", body={})
    assert (status, body["code"]) == (404, "NOT_FOUND")
    assert get(dashboard.url, "/api/nothing-here")[0] == 404


def test_a_bad_key_is_401_and_a_malformed_header_too(dashboard: DashboardProcess):
    status, body = get(dashboard.url, "/api/jobs", headers=BAD_KEY)
    assert (status, body["code"]) == (401, "UNAUTHENTICATED"), body
    status, body = get(dashboard.url, "/api/jobs", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert (status, body["code"]) == (401, "UNAUTHENTICATED") and "Bearer" in body["message"]
    status, body = get(dashboard.url, "/api/jobs/whatever/events", headers=BAD_KEY)
    assert status == 401, "an event stream with a bad key must fail before it starts"


def test_the_event_stream_delivers_every_event_in_order_then_ends(finished_job: dict):
    frames, events = finished_job["frames"], finished_job["events"]
    assert frames[0].event == "job" and frames[0].data["job"]["job_id"] == finished_job["job_id"]
    messages = [f for f in frames if f.event == "message"]
    assert [f.id for f in messages] == [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert [f.data["kind"] for f in messages] == [e.WhichOneof("payload") for e in events]
    states = [f.data["state_changed"]["to_state"] for f in messages if f.data["kind"] == "state_changed"]
    assert states == ["QUEUED", "ALLOCATING", "RUNNING", "SUCCEEDED"]
    assert frames[-1].event == "end" and frames[-1].data["job"]["state"] == "SUCCEEDED"


def test_the_event_stream_resumes_after_last_event_id(dashboard: DashboardProcess, finished_job: dict):
    job_id, total = finished_job["job_id"], len(finished_job["events"])
    reader = EventStreamReader(dashboard.url, f"/api/jobs/{job_id}/events", headers={"Last-Event-ID": "3"})
    try:
        assert reader.status == 200 and reader.content_type.startswith("text/event-stream")
        frames = reader.frames_until_end()
    finally:
        reader.close()
    assert [f.id for f in frames if f.event == "message"] == list(range(4, total + 1))
    assert frames[-1].event == "end"
    status, body = get(dashboard.url, f"/api/jobs/{job_id}/events", headers={"Last-Event-ID": "seven"})
    assert (status, body["code"]) == (400, "INVALID_ARGUMENT") and "Last-Event-ID" in body["message"]


def test_metrics_are_the_job_history_per_metric(dashboard: DashboardProcess, finished_job: dict):
    status, body = get(dashboard.url, f"/api/jobs/{finished_job['job_id']}/metrics")
    assert status == 200
    expected = [[e.metrics.step, e.metrics.values["reward/mean"]] for e in finished_job["events"]
                if e.WhichOneof("payload") == "metrics" and "reward/mean" in e.metrics.values]
    assert [step for step, _ in expected] == [1, 2]
    assert body["series"]["reward/mean"] == expected
    assert {"loss", "grad_norm"} <= set(body["series"])
    assert body["last_sequence"] == finished_job["events"][-1].sequence


def test_jobs_list_and_get_show_state_progress_and_latest_reward(dashboard: DashboardProcess,
                                                                 finished_job: dict):
    status, body = get(dashboard.url, "/api/jobs?page_size=5")
    assert status == 200
    listed = {job["job_id"]: job for job in body["jobs"]}
    job = listed[finished_job["job_id"]]
    assert (job["type"], job["state"], job["display_name"]) == ("RL", "SUCCEEDED", "api-test")
    assert job["progress"]["step"] == job["progress"]["total_steps"] == 2
    assert "reward/mean" in job["progress"]["latest_metrics"]
    status, single = get(dashboard.url, f"/api/jobs/{finished_job['job_id']}")
    assert status == 200 and single["job"]["job_id"] == finished_job["job_id"]
    assert get(dashboard.url, "/api/jobs?page_size=abc")[0] == 400


def test_cancelling_an_ended_job_is_409_and_posts_must_be_same_origin_json(dashboard: DashboardProcess,
                                                                           finished_job: dict):
    path = f"/api/jobs/{finished_job['job_id']}/cancel"
    status, body = request(dashboard.url, "POST", path, body={"reason": "too late"})
    assert (status, body["code"]) == (409, "FAILED_PRECONDITION"), body
    status, body = request(dashboard.url, "POST", path, body={}, headers={"Origin": "http://evil.example"})
    assert (status, body["code"]) == (403, "PERMISSION_DENIED")
    status, body = request(dashboard.url, "POST", path, headers={"Content-Type": "text/plain"})
    assert status == 400 and "application/json" in body["message"]
    assert get(dashboard.url, path)[0] == 405


def test_a_foreign_host_name_is_refused_while_bound_to_loopback(dashboard: DashboardProcess):
    status, body = get(dashboard.url, "/api/jobs", headers={"Host": "attacker.example:80"})
    assert (status, body["code"]) == (403, "PERMISSION_DENIED")
    assert get(dashboard.url, "/healthz", headers={"Host": "localhost"})[0] == 200


def test_workers_show_devices_and_the_leases_of_a_running_job(dashboard: DashboardProcess, running_job: str):
    status, body = get(dashboard.url, "/api/workers")
    assert status == 200
    roles = {w["role"] for w in body["workers"]}
    assert {"TRAINER", "ROLLOUT", "ENVHOST", "COORDINATOR"} <= roles
    trainer = next(w for w in body["workers"] if w["role"] == "TRAINER")
    assert trainer["devices"] and trainer["state"] == "ALIVE"
    leased = {lease["job_id"] for w in body["workers"] for lease in w["leases"]}
    assert running_job in leased


def test_a_stream_whose_client_left_is_closed_on_the_server(dashboard: DashboardProcess, running_job: str):
    reader = EventStreamReader(dashboard.url, f"/api/jobs/{running_job}/events")
    assert reader.next_frame().event == "job"
    assert get(dashboard.url, "/healthz")[1]["open_event_streams"] == 1
    reader.close()
    deadline = time.monotonic() + 15  # the job's next event (about a second) finds the socket closed
    while get(dashboard.url, "/healthz")[1]["open_event_streams"] != 0:
        assert time.monotonic() < deadline, "the server kept streaming to a client that left"
        time.sleep(0.2)


def test_tenants_show_usage_for_admins_and_403_for_a_tenant_key(dashboard: DashboardProcess, stack: LocalStack,
                                                                finished_job: dict):
    created = create_tenant(stack.address("scheduler"), stack.api_key, "dash-acme", max_devices=3)
    status, body = get(dashboard.url, "/api/tenants")
    assert status == 200
    acme = next(t for t in body["tenants"] if t["tenant_id"] == "dash-acme")
    assert acme["quota"]["max_devices"] == 3 and acme["usage"] == {"devices": 0, "running_jobs": 0, "queued_jobs": 0}
    tenant_key = {"Authorization": f"Bearer {created.api_key_secret}"}
    status, body = get(dashboard.url, "/api/tenants", headers=tenant_key)
    assert (status, body["code"]) == (403, "PERMISSION_DENIED") and "admin" in body["message"]
    status, body = get(dashboard.url, f"/api/jobs/{finished_job['job_id']}", headers=tenant_key)
    assert status == 404, "a tenant key must not see the admin's job"
    assert get(dashboard.url, "/api/jobs", headers=tenant_key)[1]["jobs"] == []


def test_sigterm_ends_open_streams_and_exits_cleanly(stack: LocalStack, running_job: str):
    own = DashboardProcess(stack.address("scheduler"), api_key=stack.api_key,
                           log_path=stack.state_dir / "logs" / "dashboard-sigterm.log", cwd=stack.state_dir)
    reader = EventStreamReader(own.url, f"/api/jobs/{running_job}/events")
    try:
        assert reader.next_frame().event == "job"
        started = time.monotonic()
        assert own.terminate(timeout=10) == 0
        assert time.monotonic() - started < 5
        while reader.next_frame() is not None:  # the open stream closes instead of hanging
            pass
    finally:
        reader.close()


def raw_get(base_url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = connection(base_url)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_samples_and_artifacts_of_a_job_and_its_files_downloaded(dashboard: DashboardProcess, finished_job: dict,
                                                                   scheduler: SchedulerClient):
    job_id = finished_job["job_id"]
    status, samples = get(dashboard.url, f"/api/jobs/{job_id}/samples")
    assert status == 200 and samples["steps"][0] == samples["step"] == 2
    assert {s["split"] for s in samples["samples"]} == {"train", "eval"}  # step 2: its batch and the final evaluation
    first = samples["samples"][0]["samples"][0]
    assert first["prompt"] and first["turns"][0]["action"] is not None and first["stop_reason"] != "UNSPECIFIED"
    status, step_1 = get(dashboard.url, f"/api/jobs/{job_id}/samples?step=1&split=train")
    assert status == 200 and [(s["step"], s["split"]) for s in step_1["samples"]] == [(1, "train")]
    assert get(dashboard.url, f"/api/jobs/{job_id}/samples?split=test")[0] == 400

    status, listed = get(dashboard.url, f"/api/jobs/{job_id}/artifacts")
    artifacts = {a["artifact_id"]: a for a in listed["artifacts"]}
    final = artifacts[f"{job_id}-final"]
    assert status == 200 and final["kind"] == "CHECKPOINT" and final["loadable_dirs"] == ["model"]

    status, headers, body = raw_get(dashboard.url, f"/api/artifacts/download?id={job_id}-final&path=model")
    assert status == 200 and headers["Content-Type"] == "application/x-tar"
    expected = {f.path: f.sha256 for a in scheduler.list_artifacts(job_id) if a.artifact_id == f"{job_id}-final"
                for f in a.files}
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        got = {m.name: hashlib.sha256(tar.extractfile(m).read()).hexdigest() for m in tar.getmembers()}
    assert got == {path: digest for path, digest in expected.items() if path.startswith("model/")}
    assert "model/config.json" in got

    status, headers, body = raw_get(dashboard.url, f"/api/artifacts/download?id={job_id}/metrics.jsonl")
    assert status == 200 and 'filename="metrics.jsonl"' in headers["Content-Disposition"]
    assert [json.loads(line)["step"] for line in body.decode().splitlines()][:1] == [0]
    for path, code in ((f"/api/artifacts/download?id={job_id}-nope", 404), ("/api/artifacts/download?id=etc", 400),
                       (f"/api/artifacts/download?id={job_id}-final&path=adapter", 404)):
        assert get(dashboard.url, path)[0] == code, path
