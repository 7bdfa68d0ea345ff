"""What the dashboard tests create on the stack: small, fast jobs and tenants."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1.scheduler_service_pb2_grpc import SchedulerServiceStub
from opentinker.client.channels import keyed_channel
from harness.job_specs import TINY_LLAMA, builtin_model, rl_spec


def tiny_rl_spec(total_steps: int, *, name: str = "dashboard", **training: int) -> dict:
    """GRPO on the built-in math game with tiny-llama: a step takes well under a second."""
    return rl_spec(total_steps, name=name, seed=7, model=builtin_model(TINY_LLAMA, 7),
                   **{"checkpoint_every_steps": 0, **training})


def create_tenant(scheduler_address: str, admin_key: str, tenant_id: str, *,
                  max_devices: int) -> pb.CreateTenantResponse:
    """A tenant with a device quota, and its first (non-admin) key in `api_key_secret`."""
    with keyed_channel(scheduler_address, admin_key) as channel:
        request = pb.CreateTenantRequest(tenant_id=tenant_id, quota={"max_devices": max_devices})
        return SchedulerServiceStub(channel).CreateTenant(request, timeout=30)
