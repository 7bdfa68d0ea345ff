"""In-process seated environments for protocol tests (the coordinator's `local_seated`)."""

from __future__ import annotations

from opentinker_coordinator.protocol.local_seated import InProcessSeatedEnvironment, local_environments

factory_of = local_environments

__all__ = ["InProcessSeatedEnvironment", "factory_of"]
