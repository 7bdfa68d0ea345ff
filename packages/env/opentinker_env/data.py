"""Data sources for games: a static dataset (JSONL or Parquet) and a deterministic seeded
generator."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")


PARQUET_SUFFIXES = (".parquet", ".pq")


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file (and line)."""


class JsonlDataset(Sequence[dict[str, Any]]):
    """A static dataset loaded once, indexable: one JSON object per non-blank line of a JSONL
    file, or one record per row of a Parquet file (`.parquet`/`.pq`; needs pyarrow).

    `required` names keys every record must have (checked at load, naming the record).
    """

    def __init__(self, path: str | Path, *, required: Sequence[str] = ()) -> None:
        self.path = Path(path)
        self.records: list[dict[str, Any]] = read_records(self.path)
        for number, record in enumerate(self.records, start=1):
            missing = [key for key in required if key not in record]
            if missing:
                raise DatasetError(f"{self.path}: record {number} lacks {', '.join(missing)}")

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict[str, Any]:  # type: ignore[override]
        return self.records[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)


class SeededGenerator(Generic[T]):
    """A dynamic, unbounded data source: item i is `make(rng, i)` with an rng seeded from
    (seed, i) alone, so any item can be regenerated in any order, on any machine."""

    def __init__(self, make: Callable[[random.Random, int], T], *, seed: int | str = 0) -> None:
        self.make = make
        self.seed = seed

    def rng(self, index: int) -> random.Random:
        """The random stream of item `index` (string seeds hash deterministically)."""
        return random.Random(f"{self.seed}:{index}")

    def __getitem__(self, index: int) -> T:
        if index < 0:
            raise IndexError(f"a generator has no negative indices, got {index}")
        return self.make(self.rng(index), index)

    def take(self, count: int, start: int = 0) -> list[T]:
        """Items start .. start+count-1."""
        return [self[index] for index in range(start, start + count)]


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSONL or (by suffix) Parquet file; DatasetError names what is wrong."""
    path = Path(path)
    return read_parquet(path) if path.suffix.lower() in PARQUET_SUFFIXES else read_jsonl(path)


def read_parquet(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a Parquet file as dicts (nested columns become lists and dicts)."""
    path = Path(path)
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise DatasetError(f"cannot read {path}: Parquet needs pyarrow (pip install pyarrow)") from None
    if not path.is_file():
        raise DatasetError(f"cannot read {path}: no such file")
    try:
        return parquet.read_table(path).to_pylist()
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DatasetError(f"cannot read {path} as Parquet: {error}") from None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (blank lines skipped); DatasetError names a bad line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise DatasetError(f"cannot read {path}: {error.strerror or error}") from None
    return [_parse_line(path, number, line) for number, line in enumerate(lines, start=1)
            if line.strip()]


def _parse_line(path: Path, number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{path}:{number}: invalid JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
    return record


def write_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write one JSON object per line (UTF-8, parents created); the number written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
