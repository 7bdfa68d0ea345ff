"""The secrets grep on the wire between hosts: the four-host stack (`harness.multihost`) runs
with mutual TLS, a tenant's job trains across the hosts (its game on the tenant's laptop
EnvHost, whose certificate the stack's CA signed), and a capture of every link between the hosts
holds neither the admin key, nor the tenant's key, nor the job's token, nor the text of the job's
spec. The capture's control: a plaintext call across the same links is seen in clear. Needs root."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import pytest

from opentinker.cli.health_probe import SERVING, check_health
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.auth.api_keys import parse_api_key
from harness.job_specs import TINY_LLAMA, builtin_model, lora, rl_spec
from harness.multihost import LAPTOP_ENVHOST, PORTS, MultiHostStack
from harness.netns import available
from harness.packet_capture import LoopbackCapture, send_marker_in_clear

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600),
              pytest.mark.skipif(not available(), reason="needs root: network namespaces and a bridge")]
CONTROL_PORT = 50999
CONTROL_SERVER = f"""
import sys, time
from concurrent import futures
import grpc
from grpc_health.v1 import health, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(2))
health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
server.add_insecure_port(sys.argv[1] + ":{CONTROL_PORT}")
server.start()
time.sleep(600)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHostStack]:
    with MultiHostStack(tmp_path_factory.mktemp("multihost-tls"), tls="mutual") as spread:
        yield spread


def secrets_of(stack: MultiHostStack, token: str) -> list[str]:
    keys = [stack.api_key, stack.tenant_key]
    return [*keys, *(parse_api_key(key)[1] for key in keys), token]


def test_nothing_secret_crosses_the_links_between_hosts_with_mutual_tls(stack: MultiHostStack) -> None:
    marker = f"multihost-marker-{uuid.uuid4().hex}"  # the job's name: never in clear
    control = f"control-marker-{uuid.uuid4().hex}"  # a plaintext call's: in clear
    laptop = stack.net.address("laptop")
    stack.net.popen("laptop", [sys.executable, "-c", CONTROL_SERVER, laptop], env={"PATH": "/usr/bin:/bin"},
                    log=stack.state_dir / "logs" / "laptop-control.log")
    ports = set(PORTS.values()) | {CONTROL_PORT}
    with LoopbackCapture(ports, interfaces=(stack.net.link_prefix,)) as capture:
        with stack.client(stack.tenant_key) as tenant, stack.client(stack.api_key) as admin:
            job = tenant.submit_job(rl_spec(2, name=marker, seed=6, model=builtin_model(TINY_LLAMA, 0),
                                            adaptation=lora(rank=4, alpha=8), checkpoint_every_steps=None,
                                            environment={"env_name": "math", "envhost": LAPTOP_ENVHOST}))
            token = ""
            for event in tenant.watch_job(job.job_id):
                if not token and event.WhichOneof("payload") == "metrics":
                    token = next((a.job_token for a in admin.get_job(job.job_id).assignments if a.job_token), "")
            final = tenant.get_job(job.job_id)
        send_marker_in_clear(f"{laptop}:{CONTROL_PORT}", control)
    assert final.state == job_pb2.Job.STATE_SUCCEEDED, (final.status_message, stack.logs())
    assert token
    wire = capture.payload
    assert capture.packets > 100 and control.encode() in wire and marker.encode() not in wire
    between_hosts = {pair for pair in capture.pairs if stack.net.gateway_address not in pair}
    assert {(stack.net.address("worker-a"), stack.net.address("control")),
            (stack.net.address("worker-a"), stack.net.address("laptop"))} & between_hosts, capture.pairs
    for secret in secrets_of(stack, token):
        assert secret.encode() not in wire
    # and every service on every host refuses a caller without the stack's certificate
    for host, name in (("control", "scheduler"), ("worker-a", "trainer"), ("worker-b", "rollout"), ("laptop", "envhost")):
        address = f"{stack.net.address(host)}:{PORTS[name]}"
        assert check_health(address, timeout=2, tls=stack.client_tls) == SERVING
        assert check_health(address, timeout=2) != SERVING
