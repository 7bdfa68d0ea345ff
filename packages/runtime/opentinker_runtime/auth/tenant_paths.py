"""Tenant areas: where the file paths of a job spec may point (no grpc, no Redis).

Every tenant owns `<tenant data dir>/<tenant_id>/` with `outputs/` (what its INFERENCE jobs
write), `datasets/` (what its SFT jobs and games read) and `models/` (its local models). A path
in a job spec is *relative*: it names a file inside the job's tenant area. An admin-configured
shared model directory may also be named by its absolute path (read-only models for every
tenant). Absolute paths elsewhere are an admin-only option: the Scheduler refuses them from tenant
keys at SubmitJob (`relative_path_problem`), and the Coordinator resolves every relative path
inside the area (`TenantAreas`, realpath: a symlink planted in the area cannot lead out of it).

A path that leads out, does not exist or cannot be read gets one message (`PathRefused`), so no
answer tells a tenant what exists on the server.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from opentinker_runtime.core.settings import setting

TENANT_DATA_DIR_ENV = "OPENTINKER_TENANT_DATA_DIR"
SHARED_MODEL_DIR_ENV = "OPENTINKER_SHARED_MODEL_DIR"
DEFAULT_TENANT_DATA_DIR = ".opentinker/tenants"
NO_SHARED_MODEL_DIR = "none"
OUTPUTS, DATASETS, MODELS = "outputs", "datasets", "models"
MAX_PATH_BYTES, MAX_NAME_BYTES = 4096, 255
RELATIVE_RULE = ("must be a path relative to your tenant area: no leading '/', no '..', no NUL, at most "
                 f"{MAX_PATH_BYTES} bytes (each name at most {MAX_NAME_BYTES})")


def tenant_data_dir_setting() -> Any:
    """The `tenant_data_dir` settings field, read from the shared OPENTINKER_TENANT_DATA_DIR."""
    return setting(Path(DEFAULT_TENANT_DATA_DIR), "Root of the tenant areas: <dir>/<tenant_id>/ holds outputs/, "
                   "datasets/ and models/, where the relative paths of that tenant's job specs point.",
                   env=TENANT_DATA_DIR_ENV, type_name="path")


def shared_model_dir_setting() -> Any:
    """The `shared_model_dir` settings field, read from the shared OPENTINKER_SHARED_MODEL_DIR."""
    return setting(NO_SHARED_MODEL_DIR, "Absolute path of a directory of read-only models every tenant may name "
                   "in model.local.path; none = no such directory.", env=SHARED_MODEL_DIR_ENV,
                   type_name="path or none", check=_check_shared_model_dir)


def _check_shared_model_dir(value: str) -> str | None:
    return None if value == NO_SHARED_MODEL_DIR or value.startswith("/") else "must be an absolute path or none"


def shared_model_dir(value: str) -> Path | None:
    """The setting's directory (None for `none`)."""
    return None if value == NO_SHARED_MODEL_DIR else Path(value)


class PathRefused(ValueError):
    """A spec path may not be used; `field` is its path in the spec (`spec.dataset.path`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def relative_path_problem(path: str) -> str | None:
    """Why `path` cannot name a file inside a tenant area, judged from its text alone (None: it can)."""
    encoded = path.encode("utf-8", "surrogateescape")
    too_long = len(encoded) > MAX_PATH_BYTES or any(len(name) > MAX_NAME_BYTES for name in encoded.split(b"/"))
    if not path.strip() or "\x00" in path or too_long or path.startswith(("/", "~")):
        return RELATIVE_RULE
    if ".." in PurePosixPath(path).parts or "\\" in path:
        return RELATIVE_RULE
    return None


def is_inside(path: str, directory: str) -> bool:
    """`path` names `directory` or something below it (both absolute and already resolved)."""
    return os.path.commonpath([path, directory]) == directory


def missing_file(field: str, kind: str) -> PathRefused:
    return PathRefused(field, f"no such file in your tenant area ({kind}/)")


def missing_model(field: str) -> PathRefused:
    return PathRefused(field, "no such model directory in your tenant area (models/) or the shared model directory")


@dataclass(frozen=True, kw_only=True)
class TenantAreas:
    """Resolves a job's relative paths inside its tenant's area (and absolute ones in the shared
    model directory). Every method returns a resolved absolute path or raises PathRefused."""

    root: Path
    shared_model_dir: Path | None = None

    def area(self, tenant_id: str, kind: str) -> Path:
        if not tenant_id or "/" in tenant_id or tenant_id in (".", ".."):
            raise ValueError(f"not a tenant id: {tenant_id!r}")
        return Path(os.path.realpath(self.root)) / tenant_id / kind

    def _inside(self, tenant_id: str, kind: str, path: str, refusal: PathRefused) -> Path:
        if relative_path_problem(path):
            raise refusal
        area = self.area(tenant_id, kind)
        resolved = os.path.realpath(area / path)
        if not is_inside(resolved, os.path.realpath(area)):
            raise refusal
        return Path(resolved)

    def dataset(self, tenant_id: str, path: str, field: str) -> Path:
        """A readable file in the tenant's datasets/."""
        refusal = missing_file(field, DATASETS)
        resolved = self._inside(tenant_id, DATASETS, path, refusal)
        if not (resolved.is_file() and os.access(resolved, os.R_OK)):
            raise refusal
        return resolved

    def output(self, tenant_id: str, path: str, field: str) -> Path:
        """Where to write in the tenant's outputs/ (its folders created); never a path leading out."""
        refusal = PathRefused(field, f"cannot write there: an output path names a file in your tenant area "
                                     f"({OUTPUTS}/), {RELATIVE_RULE.removeprefix('must be ')}")
        self.area(tenant_id, OUTPUTS).mkdir(parents=True, exist_ok=True)
        resolved = self._inside(tenant_id, OUTPUTS, path, refusal)
        if resolved == Path(os.path.realpath(self.area(tenant_id, OUTPUTS))) or resolved.is_dir():
            raise refusal
        try:
            resolved.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            raise refusal from None
        if not is_inside(os.path.realpath(resolved), os.path.realpath(self.area(tenant_id, OUTPUTS))):
            raise refusal  # a folder swapped for a symlink while we created the others
        return resolved

    def model(self, tenant_id: str, path: str, field: str) -> Path:
        """A model directory: relative in the tenant's models/, or absolute in the shared model directory."""
        refusal = missing_model(field)
        if path.startswith("/"):
            resolved = self.shared_model(path, refusal)
        else:
            resolved = self._inside(tenant_id, MODELS, path, refusal)
        if not (resolved.is_dir() and os.access(resolved, os.R_OK | os.X_OK)):
            raise refusal
        return resolved

    def shared_model(self, path: str, refusal: PathRefused) -> Path:
        if self.shared_model_dir is None or "\x00" in path:
            raise refusal
        shared = os.path.realpath(self.shared_model_dir)
        resolved = os.path.realpath(path)
        if not is_inside(resolved, shared) or resolved == shared:
            raise refusal
        return Path(resolved)

    def in_shared_model_dir(self, path: str) -> bool:
        """From its text alone: an absolute path below the shared model directory (no '..')."""
        if self.shared_model_dir is None or not path.startswith("/") or ".." in PurePosixPath(path).parts:
            return False
        shared = os.path.normpath(os.path.abspath(self.shared_model_dir))
        return "\x00" not in path and is_inside(os.path.normpath(path), shared) and os.path.normpath(path) != shared


PATH_KEY = re.compile(r"(paths?|(^|_)(files?|dirs?|director(y|ies)))$")


def is_path_key(key: str) -> bool:
    """A game config entry that names files (`dataset_path`, `extra_paths`, `data_file`, `cache_dir`):
    confined like the spec's own paths."""
    return PATH_KEY.search(key.lower()) is not None


def config_path_entries(config: Any, field: str, *, under_path_key: bool = False) -> list[tuple[str, Any, Any]]:
    """(field path, container, key) of every string under a key that names files (`is_path_key`: directly
    or in lists below it), at any depth of a JSON-like game config, e.g.
    ("spec.environment.config['dataset_path']", config, "dataset_path")."""
    found: list[tuple[str, Any, Any]] = []
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        name = f"{field}[{key!r}]"
        names_a_path = is_path_key(key) if isinstance(key, str) else under_path_key
        if names_a_path and isinstance(value, str):
            found.append((name, config, key))
        elif isinstance(value, (dict, list)):
            found.extend(config_path_entries(value, name, under_path_key=names_a_path and isinstance(value, list)))
    return found
