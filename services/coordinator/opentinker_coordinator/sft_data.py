"""SFT datasets: chat-format JSONL -> datums with loss on assistant tokens only.

Each line is {"messages": [{"role": ..., "content": ...}, ...]}; the chat template of the
job's model renders it, and only assistant content (plus its end-of-turn token) is trained.
"""

from __future__ import annotations

import json
from pathlib import Path

from opentinker.api.common.v1 import model_pb2
from opentinker.core import model_refs
from opentinker.ml.chat import render_sft_example
from opentinker.ml.tokenizers import load_tokenizer
from opentinker_coordinator.types import Datum


class DatasetError(ValueError):
    """The SFT dataset cannot be used; the message names the file and line."""


def read_conversations(path: Path) -> list[list[dict]]:
    if not path.is_file():
        raise DatasetError(f"spec.dataset.path: {path} is not a file on the coordinator")
    conversations = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DatasetError(f"{path}:{number}: expected a JSON object with 'messages' ({error})") from error
        if not any(m.get("role") == "assistant" for m in messages):
            raise DatasetError(f"{path}:{number}: no assistant message to train on")
        conversations.append(messages)
    return conversations


def load_sft_datums(path: str, model: model_pb2.ModelReference, checkpoint_root: Path) -> list[Datum]:
    tokenizer = load_tokenizer(model_refs.model_source(model, "spec.policy.model"), checkpoint_root)
    datums = []
    for messages in read_conversations(Path(path)):
        tokens, mask = render_sft_example(tokenizer, messages)
        datums.append(Datum(tokens=list(tokens), loss_mask=[float(m) for m in mask]))
    return datums
