"""SFT datasets: chat conversations from JSONL or Parquet, a configurable messages field, and
errors that name the file and record."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from opentinker_runtime.jobplan.plan import DatasetPlan
from opentinker_runtime.ml.sources import ModelSource
from opentinker_coordinator.driver.sft_data import DatasetError, load_sft_datums, read_conversations

CHAT = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]


def test_jsonl_and_parquet_give_the_same_conversations(tmp_path: Path) -> None:
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text(json.dumps({"messages": CHAT}) + "\n\n" + json.dumps({"messages": CHAT[:1] + [
        {"role": "assistant", "content": "two"}]}) + "\n")
    parquet = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": CHAT}, {"messages": CHAT[:1] + [
        {"role": "assistant", "content": "two"}]}]), parquet)
    assert read_conversations(jsonl) == read_conversations(parquet) == [CHAT, CHAT[:1] + [
        {"role": "assistant", "content": "two"}]]


def test_the_messages_field_is_configurable(tmp_path: Path) -> None:
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"dialogue": CHAT, "id": 7}]), path)
    assert read_conversations(path, "dialogue") == [CHAT]
    with pytest.raises(DatasetError, match="record 1: expected 'messages' to be a list"):
        read_conversations(path)


@pytest.mark.parametrize(("record", "problem"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "record 1: no assistant message"),
    ({"messages": "hi"}, "record 1: expected 'messages' to be a list"),
    ({"messages": [{"role": "assistant"}]}, "record 1: expected 'messages' to be a list"),
])
def test_bad_records_name_the_record(tmp_path: Path, record: dict, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DatasetError, match=problem):
        read_conversations(path)


def test_unreadable_files_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="spec.dataset.path: .* is not a file"):
        read_conversations(tmp_path / "missing.jsonl")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(DatasetError, match="spec.dataset.path: cannot read .* as Parquet"):
        read_conversations(broken)


def test_datums_train_only_the_assistant_tokens(tmp_path: Path) -> None:
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": CHAT}]), path)
    model = ModelSource.builtin("tiny-llama", seed=1)
    (datum,) = load_sft_datums(DatasetPlan(path=str(path), messages_field="messages"), model, tmp_path)
    trained = [token for token, mask in zip(datum.tokens, datum.loss_mask, strict=True) if mask]
    assert len(datum.tokens) == len(datum.loss_mask) > len(trained) >= 2  # "2" and the closing eos
