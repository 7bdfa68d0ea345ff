"""What a malformed job spec raises, read from code, a dict or a file: `SpecError`, naming the
field path (and the line and column, for files)."""

from __future__ import annotations

FieldPath = tuple[str | int, ...]


class SpecError(ValueError):
    """The job spec is malformed; the message names the field path (and the line, for files)."""

    def __init__(self, problem: str, path: FieldPath = (), *, root: str = "spec") -> None:
        self.problem, self.path, self.root = problem, path, root
        self.location = ""
        """`file:line:column` of the offending field, when the spec came from a file."""
        super().__init__(self._text())

    @property
    def dotted_path(self) -> str:
        return format_path(self.root, self.path)

    def at(self, location: str) -> SpecError:
        self.location = location
        self.args = (self._text(),)
        return self

    def _text(self) -> str:
        where = f"{self.location}: " if self.location else ""
        field = f"{format_path(self.root, self.path)}: " if self.root else ""
        return f"{where}{field}{self.problem}"


def format_path(root: str, path: FieldPath) -> str:
    text = root
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text
