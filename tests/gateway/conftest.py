"""One live stack with the Tinker gateway (auth on) and two tenants, for the real tinker SDK."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness.stack import LocalStack, run_cli
from harness.stack_pool import StackPool
from harness.stack_spec import StackSpec

tinker = pytest.importorskip("tinker", reason="the tinker SDK is a dev dependency (requirements/dev.txt)")


@dataclass(frozen=True)
class GatewayStack:
    stack: LocalStack
    url: str
    acme_key: str
    other_key: str


def _tenant_key(stack: LocalStack, tenant: str) -> str:
    result = run_cli("admin", "tenants", "create", tenant, "--scheduler", stack.address("scheduler"),
                     env={**os.environ, "OPENTINKER_API_KEY": stack.api_key})
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stdout.splitlines() if line.startswith("otk_")).strip()


SLOTS = "16"
"""Device slots of the Trainer and the Rollout: every Tinker training client is a SESSION job that
leases one of each, and the suite holds several clients at once."""

COOKBOOK_ALIAS = "Qwen/Qwen3.5-9B-Base=builtin:tiny-llama"
"""tinker-cookbook's recipes (recipes/sl_loop.py, rl_loop.py) pick their renderer from the model's
name in the cookbook's own table, so they need a name it knows: their default model, offered
here as tiny-llama (test_cookbook_loops.py)."""


GATEWAY_STACK = StackSpec.of(dashboard=False, gateway=True, OPENTINKER_TRAINER_CPU_SLOTS=SLOTS,
                             OPENTINKER_ROLLOUT_CPU_SLOTS=SLOTS, OPENTINKER_GATEWAY_MODELS=COOKBOOK_ALIAS)


@pytest.fixture(scope="package")
def gateway_stack(stack_pool: StackPool) -> Iterator[GatewayStack]:
    """The pool's stack of GATEWAY_STACK (only this package asks for it today; its tenants'
    names, acme and globex, would need a suffix for a second user of the spec)."""
    with stack_pool.lease(GATEWAY_STACK) as stack:
        yield GatewayStack(stack=stack, url=stack.gateway_url, acme_key=_tenant_key(stack, "acme"),
                           other_key=_tenant_key(stack, "globex"))


@pytest.fixture(scope="package")
def service_client(gateway_stack: GatewayStack):
    client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=f"tml-{gateway_stack.acme_key}")
    yield client
    client.close("success").result()


@pytest.fixture(scope="package")
def other_client(gateway_stack: GatewayStack):
    client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=f"tml-{gateway_stack.other_key}")
    yield client
    client.close("success").result()


@pytest.fixture(autouse=True, scope="package")
def _no_telemetry():
    previous = os.environ.get("TINKER_TELEMETRY")
    os.environ["TINKER_TELEMETRY"] = "0"
    yield
    if previous is None:
        os.environ.pop("TINKER_TELEMETRY", None)
    else:
        os.environ["TINKER_TELEMETRY"] = previous
