"""The stack over mutual TLS (`opentinker up --tls`): a job trains through every service with
each link encrypted and each caller presenting the stack's certificate; a plaintext caller, or
one without a certificate, gets nowhere; the dashboard reads the Scheduler over TLS; and a
capture of the loopback traffic between the services holds neither the admin key, nor the job's
token, nor the text of the job's spec (a plaintext call seen by the same capture does)."""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2_grpc

from opentinker.cli.health_probe import SERVING, check_health
from opentinker.client import SchedulerClient
from opentinker.client.errors import Unavailable
from opentinker.client.tls import ClientTls
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.api_keys import parse_api_key
from harness.job_specs import TINY_LLAMA, builtin_model, lora, rl_spec
from harness.stack import SERVICES, LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import DEFAULT, StackSpec
from harness.packet_capture import LoopbackCapture, can_capture, send_marker_in_clear

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
STEPS = 2
MUTUAL = StackSpec.of(tls="mutual")


@pytest.fixture(scope="module")
def stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    yield stack_pool.get(MUTUAL)


def plaintext_marker_call(port: int, marker: str) -> None:
    """A plaintext gRPC call carrying `marker` in its body (the capture's control)."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        send_marker_in_clear(f"127.0.0.1:{port}", marker)
    finally:
        server.stop(0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_job_trains_over_mutual_tls_and_nothing_secret_crosses_the_wire(stack: LocalStack) -> None:
    tls = stack.client_tls
    assert tls is not None and tls.cert_file
    marker = f"tls-marker-{uuid.uuid4().hex}"
    control_port = free_port()
    ports = {int(stack.address(name).rsplit(":", 1)[1]) for name in SERVICES} | {control_port}
    capturing = can_capture()
    capture = LoopbackCapture(ports) if capturing else None
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, tls=tls, timeout=30) as admin:
        if capture is not None:
            capture.__enter__()
        try:
            job = admin.submit_job(rl_spec(STEPS, name=marker, seed=5, model=builtin_model(TINY_LLAMA, 0),
                                           adaptation=lora(rank=4, alpha=8), checkpoint_every_steps=None))
            token = ""
            metrics = 0
            for event in admin.watch_job(job.job_id):
                if event.WhichOneof("payload") == "metrics" and "reward/mean" in event.metrics.values:
                    metrics += 1
                    token = token or next((a.job_token for a in admin.get_job(job.job_id).assignments if a.job_token), "")
            final = admin.get_job(job.job_id)
            plaintext_marker_call(control_port, marker)
        finally:
            if capture is not None:
                capture.__exit__(None, None, None)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED and metrics == STEPS, stack.logs()
    assert token, "no job token seen while the job ran"

    # every service's port refuses a plaintext caller and a caller without a certificate
    for name in SERVICES:
        assert check_health(stack.address(name), timeout=2, tls=tls) == SERVING, name
        assert check_health(stack.address(name), timeout=2) != SERVING, name
        assert check_health(stack.address(name), timeout=2, tls=ClientTls(ca_file=tls.ca_file)) != SERVING, name
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, tls=None, timeout=5) as plain:
        with pytest.raises(Unavailable):
            plain.get_job(job.job_id)

    # the dashboard (started with the stack's TLS variables) reads the Scheduler over TLS
    with urllib.request.urlopen(f"{stack.dashboard_url}/api/jobs", timeout=30) as response:
        listed = json.loads(response.read())
    assert job.job_id in json.dumps(listed)

    if capture is None:
        pytest.skip("the wire check needs root (a raw socket on lo); the rest passed")
    wire = capture.payload
    assert capture.packets > 50 and marker.encode() in wire  # it saw the traffic: the control's in clear
    plain_share = wire.count(marker.encode())
    assert plain_share == 1, f"the job's name crossed the wire in clear {plain_share - 1} more time(s)"
    for secret in (stack.api_key, parse_api_key(stack.api_key)[1], token):
        assert secret.encode() not in wire


def test_the_same_capture_sees_a_plaintext_stacks_traffic_in_clear(stack_pool: StackPool) -> None:
    """The control of the wire check: on the plaintext stack the job's name crosses in clear."""
    if not can_capture():
        pytest.skip("needs root (a raw socket on lo)")
    plain = stack_pool.get(DEFAULT)
    marker = f"plain-marker-{uuid.uuid4().hex}"
    ports = {int(plain.address(name).rsplit(":", 1)[1]) for name in SERVICES}
    with SchedulerClient(plain.address("scheduler"), api_key=plain.api_key, timeout=30) as admin:
        with LoopbackCapture(ports) as capture:
            job = admin.submit_job(rl_spec(1, name=marker, seed=5, model=builtin_model(TINY_LLAMA, 0),
                                           adaptation=lora(rank=4, alpha=8), checkpoint_every_steps=None))
            final = admin.wait(job.job_id)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED
    assert capture.payload.count(marker.encode()) >= 1
