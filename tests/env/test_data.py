"""Data sources: JsonlDataset and SeededGenerator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from opentinker_env import DatasetError, JsonlDataset, SeededGenerator, write_jsonl


def test_jsonl_dataset_loads_records_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"q": "a", "n": 1}\n\n{"q": "b", "n": 2}\n')
    dataset = JsonlDataset(path, required=("q",))
    assert len(dataset) == 2 and dataset[1] == {"q": "b", "n": 2}
    assert [record["n"] for record in dataset] == [1, 2]


def test_jsonl_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cannot read"):
        JsonlDataset(tmp_path / "missing.jsonl")
    path = tmp_path / "list.jsonl"
    path.write_text("[1, 2]\n")
    with pytest.raises(DatasetError, match=r"list\.jsonl:1: expected a JSON object, got list"):
        JsonlDataset(path)
    write_jsonl(path, [{"q": "a"}, {"x": 1}])
    with pytest.raises(DatasetError, match="record 2 lacks q"):
        JsonlDataset(path, required=("q",))


def draw(rng: random.Random, index: int) -> tuple[int, int]:
    return index, rng.randint(0, 10**9)


def test_seeded_generator_is_deterministic_and_random_access() -> None:
    generator = SeededGenerator(draw, seed=5)
    items = generator.take(100)
    assert items == SeededGenerator(draw, seed=5).take(100)
    assert generator[57] == items[57]
    assert generator.take(3, start=10) == items[10:13]
    assert len({value for _, value in items}) == 100
    assert SeededGenerator(draw, seed=6).take(100) != items
    with pytest.raises(IndexError):
        generator[-1]


def test_a_parquet_dataset_reads_like_jsonl(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from opentinker_env import read_records
    rows = [{"question": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": "4"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "math.parquet")
    assert read_records(tmp_path / "math.parquet") == rows
    assert list(JsonlDataset(tmp_path / "math.parquet", required=("question", "answer"))) == rows
    with pytest.raises(DatasetError, match="record 1 lacks missing"):
        JsonlDataset(tmp_path / "math.parquet", required=("answer", "missing"))
