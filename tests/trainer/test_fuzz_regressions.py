"""Regressions found by fuzzing the live Trainer (tests/chaos/test_fuzz_rpcs.py): bad input is
INVALID_ARGUMENT naming the field, never UNKNOWN."""

from __future__ import annotations

import pytest

from opentinker_api.common.v1 import model_pb2
from opentinker_trainer import convert
from opentinker_trainer.errors import ValidationError


@pytest.mark.parametrize("local, field", [
    (model_pb2.LocalModel(path="a" * 300), "base_model.local.path"),  # NAME_MAX: os.stat raised OSError -> UNKNOWN
    (model_pb2.LocalModel(path="/tmp/" + "b/" * 2100), "base_model.local.path"),  # PATH_MAX
    (model_pb2.LocalModel(path="/tmp/model", tokenizer_path="t" * 256), "base_model.local.tokenizer_path"),
])
def test_a_local_model_path_the_filesystem_cannot_look_up_is_invalid(local: model_pb2.LocalModel,
                                                                      field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        convert.model_source(model_pb2.ModelReference(local=local))
    assert refused.value.field == field


def test_a_local_path_within_the_limits_still_converts() -> None:
    source = convert.model_source(model_pb2.ModelReference(local=model_pb2.LocalModel(path="/tmp/" + "m" * 255)))
    assert source.path == "/tmp/" + "m" * 255


def test_a_lora_rank_beyond_the_bound_is_refused_before_anything_is_allocated() -> None:
    """A rank of 2^20 made CreateSession allocate gigabytes per layer (the call ran past its deadline)."""
    huge = model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=1 << 20))
    with pytest.raises(ValidationError) as refused:
        convert.adaptation(huge)
    assert refused.value.field == "adaptation.lora.rank"
    lora, _ = convert.adaptation(model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=convert.MAX_LORA_RANK)))
    assert lora is not None and lora.rank == convert.MAX_LORA_RANK
