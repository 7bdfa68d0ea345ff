"""Render a kustomize overlay offline, without kubectl: the subset of kustomize that deploy/k8s uses.

    python scripts/render_k8s.py deploy/k8s/overlays/gpu       # what `kubectl kustomize` prints
    python scripts/render_k8s.py deploy/k8s/overlays/cpu-dev -o /tmp/cpu-dev.yaml

What a kustomization.yaml may hold here (anything else is an error, never silently skipped):
- `resources`: YAML files (one or more documents each) and directories holding a
  kustomization.yaml, loaded in the order listed; the same object twice is an error.
- `patches`: JSON patches (RFC 6902: add, remove, replace, test), from a file (`path`) or
  inline (`patch`), applied in order to every resource its `target` selects by `kind` and `name`
  (and `group`, `version` when given). A target that selects nothing is an error (kustomize
  would skip it), and so is a strategic-merge patch (a mapping instead of a list of operations).

The output is the same objects in the same order as `kubectl kustomize` (its legacy order: kinds
in the order below, then group/version, then namespace and name), with keys sorted as it sorts
them; only the quoting of some strings differs. tests/deploy/test_k8s_manifests.py checks that
against kubectl where one is installed.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION_FILE = "kustomization.yaml"
KUSTOMIZATION_KEYS = frozenset({"apiVersion", "kind", "resources", "patches"})
PATCH_KEYS = frozenset({"path", "patch", "target"})
TARGET_KEYS = frozenset({"group", "version", "kind", "name"})
EXACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
"""kustomize reads a target's name as a regular expression; only plain names are accepted here."""
ORDER_FIRST = ("Namespace", "ResourceQuota", "StorageClass", "CustomResourceDefinition", "ServiceAccount",
               "PodSecurityPolicy", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "ConfigMap",
               "Secret", "Endpoints", "Service", "LimitRange", "PriorityClass", "PersistentVolume",
               "PersistentVolumeClaim", "Deployment", "StatefulSet", "CronJob", "PodDisruptionBudget")
ORDER_LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
"""kustomize's legacy kind order (kyaml resid/gvk.go); any other kind sorts between the two."""


class RenderError(Exception):
    """The kustomization cannot be rendered: what and where, in words."""


@dataclass(frozen=True)
class Target:
    kind: str
    name: str
    group: str | None = None
    version: str | None = None

    def selects(self, resource: dict[str, Any]) -> bool:
        group, version = split_api_version(resource["apiVersion"])
        return (resource["kind"] == self.kind and resource["metadata"]["name"] == self.name
                and self.group in (None, group) and self.version in (None, version))


def render(directory: Path) -> list[dict[str, Any]]:
    """Every resource the kustomization in `directory` builds, in kustomize's output order."""
    return sorted(build(Path(directory)), key=order_key)


def build(directory: Path) -> list[dict[str, Any]]:
    """The resources of one kustomization, patched, in load order."""
    kustomization = read_kustomization(directory)
    resources: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        for resource in load_resource(directory, entry):
            if any(resource_id(resource) == resource_id(other) for other in resources):
                raise RenderError(f"{directory}: {describe(resource)} is listed twice")
            resources.append(resource)
    for index, patch in enumerate(kustomization.get("patches", [])):
        resources = apply_patch_entry(directory, index, patch, resources)
    return resources


def read_kustomization(directory: Path) -> dict[str, Any]:
    path = directory / KUSTOMIZATION_FILE
    if not path.is_file():
        raise RenderError(f"{directory}: no {KUSTOMIZATION_FILE}")
    kustomization = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(kustomization) - KUSTOMIZATION_KEYS)
    if unknown:
        raise RenderError(f"{path}: {', '.join(unknown)} not supported by this renderer "
                          f"(supported: {', '.join(sorted(KUSTOMIZATION_KEYS))})")
    if kustomization.get("kind", "Kustomization") != "Kustomization":
        raise RenderError(f"{path}: kind must be Kustomization")
    return kustomization


def load_resource(directory: Path, entry: str) -> list[dict[str, Any]]:
    path = directory / entry
    if path.is_dir():
        return build(path)
    if not path.is_file():
        raise RenderError(f"{directory}: resource {entry} is neither a file nor a directory")
    documents = [document for document in yaml.safe_load_all(path.read_text()) if document is not None]
    for document in documents:
        if not isinstance(document, dict) or not document.get("apiVersion") or not document.get("kind") \
                or not (document.get("metadata") or {}).get("name"):
            raise RenderError(f"{path}: every document needs apiVersion, kind and metadata.name")
    return documents


def apply_patch_entry(directory: Path, index: int, entry: dict[str, Any],
                      resources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    where = f"{directory / KUSTOMIZATION_FILE}: patches[{index}]"
    unknown = sorted(set(entry) - PATCH_KEYS)
    if unknown or ("path" in entry) == ("patch" in entry) or "target" not in entry:
        raise RenderError(f"{where}: needs a target and exactly one of path, patch"
                          + (f" ({', '.join(unknown)} not supported)" if unknown else ""))
    operations = yaml.safe_load((directory / entry["path"]).read_text() if "path" in entry else entry["patch"])
    if not isinstance(operations, list):
        raise RenderError(f"{where}: only JSON patches (a list of operations) are supported, "
                          "not strategic-merge patches")
    target = parse_target(where, entry["target"])
    selected = [i for i, resource in enumerate(resources) if target.selects(resource)]
    if not selected:
        raise RenderError(f"{where}: the target {target.kind}/{target.name} selects no resource")
    patched = list(resources)
    for i in selected:
        try:
            patched[i] = apply_json_patch(resources[i], operations)
        except RenderError as error:
            raise RenderError(f"{where} on {describe(resources[i])}: {error}") from None
    return patched


def parse_target(where: str, target: dict[str, Any]) -> Target:
    unknown = sorted(set(target) - TARGET_KEYS)
    if unknown or not target.get("kind") or not target.get("name"):
        raise RenderError(f"{where}: a target names a kind and a name (and may name group, version)"
                          + (f"; {', '.join(unknown)} not supported" if unknown else ""))
    if not EXACT_NAME.match(target["name"]):
        raise RenderError(f"{where}: target name {target['name']!r} must be a plain name, not a pattern")
    return Target(kind=target["kind"], name=target["name"], group=target.get("group"),
                  version=target.get("version"))


def apply_json_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """`document` after the RFC 6902 `operations` (add, remove, replace, test), each in turn."""
    result = copy.deepcopy(document)
    for number, operation in enumerate(operations):
        op, path = operation.get("op"), operation.get("path")
        if op not in ("add", "remove", "replace", "test") or not isinstance(path, str):
            raise RenderError(f"operation {number}: op must be add, remove, replace or test, with a path")
        if op in ("add", "replace", "test") and "value" not in operation:
            raise RenderError(f"operation {number} ({op} {path}): needs a value")
        tokens = pointer_tokens(path)
        if not tokens:
            raise RenderError(f"operation {number}: the whole document cannot be patched here")
        parent = resolve(result, tokens[:-1], path)
        last = tokens[-1]
        value = copy.deepcopy(operation.get("value"))
        if op == "add":
            add(parent, last, value, path)
        elif op == "test":
            if child(parent, last, path) != value:
                raise RenderError(f"operation {number}: test of {path} failed: "
                                  f"{child(parent, last, path)!r} is not {value!r}")
        else:
            key = existing_key(parent, last, path)
            if op == "remove":
                del parent[key]
            else:
                parent[key] = value
    return result


def pointer_tokens(path: str) -> list[str]:
    """A JSON pointer's reference tokens (RFC 6901: ~1 is '/', ~0 is '~')."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise RenderError(f"{path!r} is not a JSON pointer (it starts with /)")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def resolve(document: Any, tokens: list[str], path: str) -> Any:
    node = document
    for token in tokens:
        node = child(node, token, path)
    if not isinstance(node, (dict, list)):
        raise RenderError(f"{path}: its parent is neither a mapping nor a list")
    return node


def child(node: Any, token: str, path: str) -> Any:
    return node[existing_key(node, token, path)]


def existing_key(node: Any, token: str, path: str) -> str | int:
    if isinstance(node, dict):
        if token not in node:
            raise RenderError(f"{path}: no {token!r} there")
        return token
    if isinstance(node, list):
        index = list_index(token, path)
        if index >= len(node):
            raise RenderError(f"{path}: index {index} is past the end of a list of {len(node)}")
        return index
    raise RenderError(f"{path}: {token!r} is below a scalar")


def add(parent: dict[str, Any] | list[Any], token: str, value: Any, path: str) -> None:
    if isinstance(parent, dict):
        parent[token] = value
        return
    index = len(parent) if token == "-" else list_index(token, path)
    if index > len(parent):
        raise RenderError(f"{path}: index {index} is past the end of a list of {len(parent)}")
    parent.insert(index, value)


def list_index(token: str, path: str) -> int:
    if not re.fullmatch(r"0|[1-9][0-9]*", token):
        raise RenderError(f"{path}: {token!r} is not a list index")
    return int(token)


def split_api_version(api_version: str) -> tuple[str, str]:
    """("apps", "v1") for apps/v1, ("", "v1") for v1."""
    group, _, version = api_version.rpartition("/")
    return group, version


def resource_id(resource: dict[str, Any]) -> tuple[str, str, str, str]:
    return (resource["apiVersion"], resource["kind"], resource["metadata"].get("namespace", ""),
            resource["metadata"]["name"])


def describe(resource: dict[str, Any]) -> str:
    return f"{resource['kind']}/{resource['metadata']['name']}"


def order_key(resource: dict[str, Any]) -> tuple[int, str, str, str]:
    """kustomize's legacy order: the kind's rank, then group_version_kind, then namespace and name."""
    kind = resource["kind"]
    if kind in ORDER_FIRST:
        rank = ORDER_FIRST.index(kind) - len(ORDER_FIRST)
    elif kind in ORDER_LAST:
        rank = ORDER_LAST.index(kind) + 1
    else:
        rank = 0
    group, version = split_api_version(resource["apiVersion"])
    gvk = "_".join((group or "~G", version or "~V", kind))
    return rank, gvk, resource["metadata"].get("namespace", ""), resource["metadata"]["name"]


def to_yaml(resources: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(resources, sort_keys=True, default_flow_style=False, width=4096)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a directory holding a kustomization.yaml")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of standard output")
    args = parser.parse_args(argv)
    try:
        text = to_yaml(render(args.directory))
    except (RenderError, OSError, yaml.YAMLError) as error:
        print(f"render_k8s: {error}", file=sys.stderr)
        return 1
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
