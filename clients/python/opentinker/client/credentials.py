"""Where a client finds its API key, and the local stack's admin key file.

    resolve_api_key(explicit)  ->  explicit
                               or  $OPENTINKER_API_KEY
                               or  the file named by $OPENTINKER_API_KEY_FILE
                               or  .opentinker/admin.key (the key `opentinker up` made here)
                               or  "" (no key: only a stack with OPENTINKER_AUTH=disabled answers)

Keys are read from the environment or files, never from command-line arguments (visible to
every user of the machine in `ps`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from opentinker_api.conventions import new_api_key

API_KEY_ENV = "OPENTINKER_API_KEY"
API_KEY_FILE_ENV = "OPENTINKER_API_KEY_FILE"
ADMIN_KEY_FILE = "admin.key"
DEFAULT_STATE_DIR = Path(".opentinker")


def resolve_api_key(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The key by the order above (`environ`: the variables to read; default os.environ)."""
    return api_key_and_source(explicit, environ)[0]


def api_key_and_source(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(key, where it came from, in words) by the order above; ("", "") when there is none."""
    environ = os.environ if environ is None else environ
    if explicit:
        return explicit.strip(), "the explicit api_key"
    if environ.get(API_KEY_ENV):
        return environ[API_KEY_ENV].strip(), f"${API_KEY_ENV}"
    if environ.get(API_KEY_FILE_ENV):
        return Path(environ[API_KEY_FILE_ENV]).read_text().strip(), environ[API_KEY_FILE_ENV]
    local = DEFAULT_STATE_DIR / ADMIN_KEY_FILE
    return (local.read_text().strip(), str(local)) if local.is_file() else ("", "")


def admin_key_path(state_dir: Path) -> Path:
    return state_dir / ADMIN_KEY_FILE


def ensure_admin_key(state_dir: Path) -> str:
    """The local stack's admin key, created (readable by the owner only) on first use."""
    path = admin_key_path(state_dir)
    if path.is_file():
        return path.read_text().strip()
    state_dir.mkdir(parents=True, exist_ok=True)
    key = new_api_key()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as sink:
        sink.write(key + "\n")
    return key
