"""The dashboard's pure parts: key and host checks, stream positions, metric series, routes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.dashboard.errors import ApiError
from opentinker.dashboard.guards import caller_key, check_host, check_post
from opentinker.dashboard.metrics import metric_series
from opentinker.dashboard.routes import MethodNotAllowed, resolve
from opentinker.dashboard.sse import sse_frame, start_sequence
from tests.dashboard._dashboard import DashboardProcess, get

CLI_ENTRY = ("-m", "opentinker.cli.main", "dashboard")  # `opentinker dashboard`


def metrics_event(sequence: int, step: int, values: dict[str, float], agent_id: str = "") -> job_pb2.JobEvent:
    return job_pb2.JobEvent(sequence=sequence, metrics=job_pb2.MetricsReported(step=step, agent_id=agent_id,
                                                                               values=values))


def test_the_request_key_wins_over_the_dashboard_key_and_a_malformed_header_is_401():
    assert caller_key("Bearer otk_a_b", "otk_default") == "otk_a_b"
    assert caller_key(None, "otk_default") == "otk_default"
    assert caller_key("", "") == ""
    with pytest.raises(ApiError) as raised:
        caller_key("Basic abc", "otk_default")
    assert raised.value.http_status == 401


def test_loopback_binds_answer_only_loopback_host_names():
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost"):
        check_host(host, "127.0.0.1")
    for host in ("evil.example:8080", "10.0.0.5:8080", None):
        with pytest.raises(ApiError) as raised:
            check_host(host, "127.0.0.1")
        assert raised.value.http_status == 403
    check_host("dashboard.internal:8080", "0.0.0.0")  # noqa: S104 - an explicit choice to serve others


def test_posts_must_be_json_from_the_same_origin():
    check_post(None, "127.0.0.1:80", "application/json; charset=utf-8")
    check_post("http://127.0.0.1:80", "127.0.0.1:80", "application/json")
    with pytest.raises(ApiError, match="cross-origin"):
        check_post("http://evil.example", "127.0.0.1:80", "application/json")
    with pytest.raises(ApiError, match="application/json"):
        check_post(None, "127.0.0.1:80", "application/x-www-form-urlencoded")


def test_a_stream_starts_after_last_event_id_else_after_sequence_else_at_the_beginning():
    assert start_sequence("12", "3") == 12
    assert start_sequence(None, "3") == 3
    assert start_sequence(None, None) == 0
    for bad in ("x", "-1"):
        with pytest.raises(ApiError) as raised:
            start_sequence(bad, None)
        assert raised.value.http_status == 400


def test_an_sse_frame_is_one_data_line_with_its_id():
    assert sse_frame({"a": 1}, event_id=7) == b'id: 7\ndata: {"a":1}\n\n'
    assert sse_frame({"b": "x\ny"}, event="end") == b'event: end\ndata: {"b":"x\\ny"}\n\n'


def test_metric_series_per_metric_ordered_by_step_latest_repeat_wins_nan_is_null():
    events = [metrics_event(1, 2, {"reward/mean": 0.5}), metrics_event(2, 1, {"reward/mean": 0.25, "loss": 1.0}),
              job_pb2.JobEvent(sequence=3, log=job_pb2.LogLine(message="hi")),
              metrics_event(4, 2, {"reward/mean": 0.75}), metrics_event(5, 3, {"loss": math.nan}),
              metrics_event(6, 1, {"elo": 1010.0}, agent_id="black")]
    assert metric_series(events) == {"black/elo": [[1, 1010.0]], "loss": [[1, 1.0], [3, None]],
                                     "reward/mean": [[1, 0.25], [2, 0.75]]}


def test_routes_decode_job_ids_and_tell_the_allowed_method():
    match = resolve("GET", "/api/jobs/job%2Dabc/metrics")
    assert (match.handler, match.params) == ("job_metrics", {"job_id": "job-abc"})
    assert resolve("GET", "/jobs/job-abc").handler == "page"
    assert resolve("GET", "/static/../secret.py") is None
    with pytest.raises(MethodNotAllowed) as raised:
        resolve("DELETE", "/api/jobs/job-abc/cancel")
    assert raised.value.allowed == ["POST"]


def test_the_cli_sub_command_serves_the_page_without_a_key_and_stops_on_sigterm(tmp_path: Path):
    process = DashboardProcess("127.0.0.1:1", api_key="", log_path=tmp_path / "dashboard.log", cwd=tmp_path,
                               entry=CLI_ENTRY)
    try:
        status, health = get(process.url, "/healthz")
        assert status == 200 and health["scheduler"] == "127.0.0.1:1"
        status, body = get(process.url, "/api/jobs")  # nothing listens on port 1
        assert (status, body["code"]) == (503, "UNAVAILABLE")
    finally:
        assert process.terminate() == 0
    logged = (tmp_path / "dashboard.log").read_text()
    assert '"event": "dashboard_stopped"' in logged and '"service": "dashboard"' in logged


def test_the_workers_view_lists_each_shared_base_with_the_jobs_on_it():
    from opentinker_api.scheduler.v1 import worker_pb2
    from opentinker.dashboard.views import worker_view

    worker = worker_pb2.Worker(worker_id="trainer@h:1", resident_models=[
        worker_pb2.ResidentModel(device_id="cuda:0", model_key="builtin:tiny-llama@0/default", job_ids=["job-a", "job-b"])])
    assert worker_view(worker)["resident_models"] == [
        {"device_id": "cuda:0", "model_key": "builtin:tiny-llama@0/default", "job_ids": ["job-a", "job-b"]}]
    assert worker_view(worker_pb2.Worker(worker_id="idle"))["resident_models"] == []
