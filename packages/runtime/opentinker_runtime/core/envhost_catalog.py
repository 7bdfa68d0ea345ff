"""The environments an EnvHost serves, as it publishes them when it registers with the Scheduler:
the worker label `opentinker.dev/environments`, the names sorted and comma-separated.

The Scheduler reads it at SubmitJob to refuse an env name that no EnvHost the job may play on
serves; a worker without the label (an older EnvHost, another implementation of the API) serves
"unknown" environments, and nothing is refused on its account. A label is the registering
worker's word (a tenant's own EnvHost included): it is read bounded, and names that are no game
names are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

ENVIRONMENTS_LABEL = "opentinker.dev/environments"
MAX_NAMES = 1000
NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
"""A game name (opentinker_runtime.games.registry.GAME_NAME_RE)."""


def environments_label(names: Iterable[str]) -> str:
    """The label's value for an EnvHost serving `names`."""
    return ",".join(sorted(set(names)))


def served_environments(labels: Mapping[str, str]) -> frozenset[str] | None:
    """The environments a worker's labels say it serves; None when it does not say."""
    value = labels.get(ENVIRONMENTS_LABEL)
    if value is None:
        return None
    names = (name.strip() for name in value.split(",", MAX_NAMES)[:MAX_NAMES])
    return frozenset(name for name in names if NAME.match(name))
