"""ExportWeights: packages that rebuild the policy on a receiver, snapshot semantics."""

from __future__ import annotations

import pytest
import torch

from opentinker_runtime.ml.models import LoraSpec, apply_lora, build_builtin
from opentinker_runtime.ml.weights import WeightsAssembler, load_lora_state_dict
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.export import WeightsFormat, export_weights
from tests.trainer.helpers import CE, MODEL, policy_logprobs, session, sft_datums

LORA = LoraSpec(rank=4, alpha=8)


def trained(**kwargs):
    s = session(lr=5e-2, **kwargs)
    s.forward_backward(sft_datums(), CE)
    s.optim_step()
    return s


def assemble(export) -> dict[str, torch.Tensor]:
    assembler = WeightsAssembler(export.package.specs, export.package.sha256)
    for chunk in export.package.chunks:
        assembler.add(*chunk)
    return assembler.finish()


def test_lora_adapter_export_rebuilds_the_policy_on_the_base() -> None:
    s = trained(lora=LORA)
    export = export_weights(s, chunk_bytes=4096)
    assert export.format == WeightsFormat.LORA_ADAPTER and export.lora == LORA
    assert export.policy_version == 1
    receiver = apply_lora(build_builtin(MODEL, 0), LORA)
    load_lora_state_dict(receiver, assemble(export))
    assert torch.allclose(policy_logprobs(receiver), policy_logprobs(s.model), atol=1e-6)


@pytest.mark.parametrize("lora", [LORA, None], ids=["lora-merged", "full"])
def test_full_export_loads_into_a_plain_model(lora) -> None:
    s = trained(lora=lora)
    export = export_weights(s, WeightsFormat.FULL)
    assert export.format == WeightsFormat.FULL and export.lora is None
    receiver = build_builtin(MODEL, 1)
    receiver.load_state_dict(assemble(export))
    assert torch.allclose(policy_logprobs(receiver), policy_logprobs(s.model), atol=1e-5)


def test_export_is_a_snapshot_taken_before_later_steps() -> None:
    s = trained()
    export = export_weights(s)
    before = policy_logprobs(s.model)
    s.forward_backward(sft_datums(), CE)
    s.optim_step()
    receiver = build_builtin(MODEL, 1)
    receiver.load_state_dict(assemble(export))  # sha256 still matches
    assert torch.allclose(policy_logprobs(receiver), before, atol=1e-6)


def test_lora_export_of_a_full_session_is_refused() -> None:
    with pytest.raises(ValidationError, match="LORA_ADAPTER needs a LoRA session"):
        export_weights(session(), WeightsFormat.LORA_ADAPTER)
