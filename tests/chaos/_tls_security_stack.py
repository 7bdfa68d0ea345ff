"""The security suites over mutual TLS (issue 28: "the secrets grep and tenant-isolation suites
run over TLS"): `opentinker up --tls mutual`'s stack, shared with tests/e2e/test_tls_stack.py.
For the module, the test process's clients (SchedulerClient, `open_channel`, the CLI's helpers)
find the stack's CA and client certificate in OPENTINKER_TLS_* (restored afterwards), so every
call of the suite goes over TLS; a plaintext caller gets nowhere (`assert_tls_only`).

    from tests.chaos._tls_security_stack import tls_admin, tls_stack  # noqa: F401 - the fixtures `stack` and `admin`
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from opentinker.cli.health_probe import SERVING, check_health
from opentinker.client import SchedulerClient
from opentinker.client.tls import CA_ENV, CERT_ENV, KEY_ENV
from harness.stack import SERVICES, LocalStack
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec

MUTUAL = StackSpec.of(tls="mutual")


@pytest.fixture(scope="module", name="stack")
def tls_stack(stack_pool: StackPool) -> Iterator[LocalStack]:
    with stack_pool.lease(MUTUAL) as local:
        tls = local.client_tls
        assert tls is not None and tls.cert_file, "the stack runs mutual TLS"
        saved = {name: os.environ.get(name) for name in (CA_ENV, CERT_ENV, KEY_ENV)}
        os.environ.update({CA_ENV: tls.ca_file, CERT_ENV: tls.cert_file, KEY_ENV: tls.key_file})
        try:
            yield local
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture(scope="module", name="admin")
def tls_admin(stack: LocalStack) -> Iterator[SchedulerClient]:
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key, timeout=30) as client:
        yield client


def assert_tls_only(stack: LocalStack) -> None:
    """Every gRPC service answers over the stack's TLS and refuses a plaintext caller."""
    for service in SERVICES:
        address = stack.address(service)
        assert check_health(address, timeout=5, tls=stack.client_tls) == SERVING, service
        with grpc.insecure_channel(address) as plaintext:
            with pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(plaintext).Check(health_pb2.HealthCheckRequest(), timeout=2)
