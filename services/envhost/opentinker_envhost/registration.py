"""The EnvHost's registration with the Scheduler: a worker of role envhost (named when its settings
name it) whose label `opentinker.dev/environments` lists the games it serves, so SubmitJob can
refuse an env name that no EnvHost the job may play on serves (opentinker_runtime.core.envhost_catalog)."""

from __future__ import annotations

from opentinker_runtime.core.envhost_catalog import ENVIRONMENTS_LABEL, environments_label
from opentinker_runtime.workers.registration import WorkerRegistration
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.settings import EnvHostSettings


def envhost_registration(settings: EnvHostSettings, catalog: GameCatalog) -> WorkerRegistration:
    """Start/stop hooks registering this EnvHost and its games (the catalog is fixed at start)."""
    registration = WorkerRegistration.for_settings(settings, role="envhost", name=settings.name)
    registration.agent.registration.labels[ENVIRONMENTS_LABEL] = environments_label(catalog.specs)
    return registration
