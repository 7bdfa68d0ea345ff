"""Job spec files: YAML parsed with line numbers, so every error points at the line.

A file holds the spec itself, or a mapping with the spec under `spec:` (then the other keys,
such as `name:` or comments for people, are ignored). `locate(file, path)` finds where a field
sits; the CLI also uses it to point a Scheduler INVALID_ARGUMENT (which names the field path)
at the line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import yaml

from opentinker.client.spec_errors import FieldPath, SpecError

_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


class SpecFile:
    """One spec file: its text, its YAML node tree and where the spec's root is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.text = path.read_text()
        try:
            self.root = yaml.compose(self.text, Loader=yaml.SafeLoader)
            self.data = yaml.safe_load(self.text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            problem = getattr(error, "problem", None) or str(error)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            raise SpecError(f"not valid YAML: {problem}", root="").at(where) from None
        self.prefix: FieldPath = ()
        if isinstance(self.data, dict) and isinstance(self.data.get("spec"), dict):
            self.data, self.prefix = self.data["spec"], ("spec",)

    def locate(self, path: FieldPath) -> str:
        """`file:line:column` of the deepest part of `path` that exists (a mapping key is placed at
        the key, a list item at the item; the file alone if nothing matches)."""
        node, mark = self.root, None
        for part in (*self.prefix, *path):
            found = _child(node, part)
            if found is None:
                break
            mark, node = found
        if mark is None:
            return str(self.path)
        return f"{self.path}:{mark.line + 1}:{mark.column + 1}"


def _child(node: yaml.Node | None, part: str | int) -> tuple[yaml.Mark, yaml.Node] | None:
    """(where `part` is written, its value node) under `node`."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if key.value == part:
                return key.start_mark, value
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part].start_mark, node.value[part]
    return None


def parse_field_path(text: str, root: str = "spec") -> FieldPath | None:
    """("training", "group_size") from "spec.training.group_size"; None if `text` is not one."""
    if not text.startswith(root):
        return None
    rest, parts = text[len(root):], []
    for match in _PATH_PART.finditer(rest):
        parts.append(match.group(1) if match.group(1) else int(match.group(2)))
    consumed = "".join(m.group(0) for m in _PATH_PART.finditer(rest))
    return tuple(parts) if consumed == rest else None


def load_yaml_spec(path: Path, parse: Callable[[dict], object]):  # noqa: ANN201 - the parser's message
    """parse(the spec's dict), with any SpecError pointed at its line in `path`."""
    spec_file = SpecFile(path)
    if spec_file.data is None:
        raise SpecError("the file is empty", root="").at(str(path))
    if not isinstance(spec_file.data, dict):
        raise SpecError(f"expected a mapping of spec fields, got {type(spec_file.data).__name__}").at(
            spec_file.locate(()))
    try:
        return parse(spec_file.data)
    except SpecError as error:
        raise error.at(spec_file.locate(error.path)) from None
