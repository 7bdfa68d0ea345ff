"""Entry point of the Trainer service: parse settings, build, serve, stop gracefully."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from opentinker_runtime.workers.devices import discover_devices
from opentinker_runtime.core.entrypoint import run_service
from opentinker_runtime.core.memory import keep_freed_memory
from opentinker_runtime.workers.reaping import attempt_callbacks, idle_reaper
from opentinker_runtime.core.server import ServerPlan
from opentinker_runtime.core.torch_threads import apply_torch_threads
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_trainer.settings import TrainerSettings

SERVICE_NAME = "trainer"
SHARED_REAP_INTERVAL_S = 30.0


async def build_plan(settings: TrainerSettings) -> ServerPlan:
    """What the server hosts: the TrainerService over an empty session registry."""
    from opentinker_runtime.ml.models import quiet_transformers  # torch loads here, after settings parse
    from opentinker_trainer.servicer import trainer_service_binding
    from opentinker_trainer.trainer import build_registry
    from opentinker_trainer.errors import SessionNotFoundError
    from opentinker_trainer.peer_client import PeerClient
    from opentinker_trainer.shared_exports import SharedExports

    quiet_transformers()
    keep_freed_memory()  # exports allocate and free a model's worth of buffers each time
    devices = discover_devices(settings.cpu_slots,
                               shares=settings.lora_jobs_per_device if settings.share_lora_base else 0)
    registry = build_registry(settings.checkpoint_dir, settings.device,
                              [device.device_id for device in devices],
                              idle_ttl_s=settings.session_idle_ttl_seconds,
                              share_lora_base=settings.share_lora_base,
                              cycle_gather_s=settings.cycle_gather_ms / 1000,
                              host=advertised_host(settings.reachable_address),
                              start_peer=PeerClient(settings.api_key).start,
                              collective_timeout_s=settings.collective_timeout_seconds)
    registration = WorkerRegistration.for_settings(settings, role="trainer", devices=devices,
                                                   resident_models=registry.resident_models,
                                                   **attempt_callbacks(registry))
    shared = SharedExports(Path(settings.shared_weights_dir) if settings.shared_weights_dir else None)
    shared.open()

    def is_open(session_id: str) -> bool:
        try:
            registry.view(session_id)
        except SessionNotFoundError:
            return False
        return True

    async def reap_shared() -> None:
        shared.forget_closed(is_open)
        shared.sweep()

    return ServerPlan(services=[trainer_service_binding(registry, shared)],
                      start_hooks=[idle_reaper(registry.reap_idle, registry.idle_ttl_s),
                                   idle_reaper(reap_shared, SHARED_REAP_INTERVAL_S * 4), registration.start],
                      close_hooks=[registration.stop, registry.close_all, _sync(shared.close)])


def advertised_host(address: str) -> str:
    """The host part of host:port (brackets of an IPv6 literal removed): where this Trainer's
    data-parallel groups across hosts meet."""
    host = address.rpartition(":")[0] or address
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _sync(function: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        function()
    return call


def main() -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    return run_service(TrainerSettings, _process_plan, service=SERVICE_NAME)


async def _process_plan(settings: TrainerSettings) -> ServerPlan:
    """The service process's plan: its torch threads first (process-wide, so not in `build_plan`,
    which tests call inside their own process), before any model computes."""
    from opentinker_trainer import shared_prefix  # torch: after settings parse and the port check

    apply_torch_threads(settings.torch_threads, service=SERVICE_NAME)
    shared_prefix.set_enabled(settings.share_prefixes)
    return await build_plan(settings)
