"""SFT datasets: chat-format JSONL -> datums with loss on assistant tokens only.

Each line is {"messages": [{"role": ..., "content": ...}, ...]}; the chat template of the
job's model renders it, and only assistant content (plus its end-of-turn token) is trained.
"""

from __future__ import annotations

from pathlib import Path

from opentinker_runtime.jobplan import defaults
from opentinker_runtime.jobplan.plan import DatasetPlan
from opentinker_runtime.ml.chat import render_sft_example
from opentinker_env.data import DatasetError as EnvDatasetError
from opentinker_env.data import read_records
from opentinker_runtime.ml.sources import ModelSource
from opentinker_runtime.ml.tokenizers import load_tokenizer
from opentinker_coordinator.types import Datum


class DatasetError(ValueError):
    """The SFT dataset cannot be used; the message names the file and line."""


def read_conversations(path: Path, messages_field: str = defaults.MESSAGES_FIELD) -> list[list[dict]]:
    """The conversations of a JSONL or Parquet file: each record's `messages_field` is a list
    of {"role", "content"} messages with at least one assistant message."""
    if not path.is_file():
        raise DatasetError(f"spec.dataset.path: {path} is not a file on the coordinator")
    try:
        records = read_records(path)
    except EnvDatasetError as error:
        raise DatasetError(f"spec.dataset.path: {error}") from None
    return [_conversation(path, number, record, messages_field)
            for number, record in enumerate(records, start=1)]


def _conversation(path: Path, number: int, record: dict, field: str) -> list[dict]:
    messages = record.get(field)
    if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise DatasetError(f"{path}: record {number}: expected '{field}' to be a list of "
                           "{\"role\": ..., \"content\": ...} messages")
    if not any(m["role"] == "assistant" for m in messages):
        raise DatasetError(f"{path}: record {number}: no assistant message to train on")
    return messages


def load_sft_datums(dataset: DatasetPlan, model: ModelSource, checkpoint_root: Path) -> list[Datum]:
    """The dataset's conversations rendered with the chat template of the policy's model."""
    tokenizer = load_tokenizer(model, checkpoint_root)
    datums = []
    for messages in read_conversations(Path(dataset.path), dataset.messages_field):
        tokens, mask = render_sft_example(tokenizer, messages)
        datums.append(Datum(tokens=list(tokens), loss_mask=[float(m) for m in mask]))
    return datums
