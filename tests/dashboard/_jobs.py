"""What the dashboard tests create on the stack: small, fast jobs and tenants."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_api.scheduler.v1.scheduler_service_pb2_grpc import SchedulerServiceStub
from opentinker.client.channels import keyed_channel


def tiny_rl_spec(total_steps: int, *, name: str = "dashboard", **training: int) -> dict:
    """GRPO on the built-in math game with tiny-llama: a step takes well under a second."""
    return {
        "type": "RL", "display_name": name,
        "policy": {"model": {"builtin": {"name": "tiny-llama", "seed": 7}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": 1e-3}},
                   "sampling": {"max_new_tokens": 4, "temperature": 1.0}},
        "environment": {"env_name": "math", "config": {"seed": 7, "eval_size": 4}},
        "training": {"total_steps": total_steps, "batch_size": 2, "group_size": 2, "eval_episodes": 4,
                     "checkpoint_every_steps": 0, "seed": 7, **training},
    }


def create_tenant(scheduler_address: str, admin_key: str, tenant_id: str, *,
                  max_devices: int) -> pb.CreateTenantResponse:
    """A tenant with a device quota, and its first (non-admin) key in `api_key_secret`."""
    with keyed_channel(scheduler_address, admin_key) as channel:
        request = pb.CreateTenantRequest(tenant_id=tenant_id, quota={"max_devices": max_devices})
        return SchedulerServiceStub(channel).CreateTenant(request, timeout=30)
