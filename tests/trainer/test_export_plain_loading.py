"""Exported checkpoints load in a process that cannot import any OpenTinker code, with plain
transformers and peft, and give the Trainer's logits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from opentinker_runtime.ml.checkpoints import CheckpointFormat
from opentinker_runtime.ml.logprobs import forward_logits
from opentinker_runtime.ml.models import save_builtin_as_local
from opentinker_runtime.ml.sources import LoraSpec
from opentinker_trainer.checkpointing import save_checkpoint
from tests.trainer.helpers import CE, MODEL, rl_datums, session, sft_datums

LOADER = textwrap.dedent('''
    import sys
    for blocked in ("opentinker", "opentinker_trainer", "opentinker_rollout", "tests"):
        sys.modules[blocked] = None  # any import of project code fails
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kind, directory, base, tokens_file, out = sys.argv[1:]
    if kind == "peft":
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), directory)
    else:
        model = AutoModelForCausalLM.from_pretrained(directory)
        AutoTokenizer.from_pretrained(directory)  # the tokenizer travels with the model
    tokens = torch.load(tokens_file)
    with torch.no_grad():
        torch.save(model.eval()(input_ids=tokens).logits, out)
''')


def plain_logits(tmp_path: Path, kind: str, directory: Path, base: Path, tokens: torch.Tensor) -> torch.Tensor:
    (tmp_path / "loader.py").write_text(LOADER)
    torch.save(tokens, tmp_path / "tokens.pt")
    out = tmp_path / f"{kind}-logits.pt"
    subprocess.run([sys.executable, str(tmp_path / "loader.py"), kind, str(directory), str(base),
                    str(tmp_path / "tokens.pt"), str(out)], check=True, cwd=tmp_path, timeout=120)
    return torch.load(out)


def trained(tmp_path: Path, lora: LoraSpec | None):
    s = session(tmp_path, lora=lora, lr=5e-2)
    for _ in range(2):
        s.forward_backward(sft_datums(), CE)
        s.optim_step()
    return s


def trainer_logits(s, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return forward_logits(s.model.eval(), tokens, torch.ones_like(tokens))


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("lora", "format", "kind"), [
    (LoraSpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj")), CheckpointFormat.PEFT_ADAPTER, "peft"),
    (LoraSpec(rank=4, alpha=8), CheckpointFormat.HF_MODEL, "hf"),
    (None, CheckpointFormat.HF_MODEL, "hf"),
], ids=["peft-adapter", "lora-merged", "full"])
def test_export_loads_with_plain_transformers_and_gives_the_trainers_logits(tmp_path, lora, format, kind) -> None:
    s = trained(tmp_path, lora)
    record = save_checkpoint(s, tmp_path, format=format)
    directory = record.path / ("adapter" if kind == "peft" else "model")
    base = save_builtin_as_local(MODEL, 0, tmp_path / "base")
    tokens = torch.tensor([list(d.tokens) for d in rl_datums(count=2, length=10)[:1]] * 2)
    expected = trainer_logits(s, tokens)
    got = plain_logits(tmp_path, kind, directory, base, tokens)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5)
    untrained = trainer_logits(session(tmp_path, lora=lora), tokens)
    assert not torch.allclose(got, untrained, atol=1e-3)  # the export carries the training
