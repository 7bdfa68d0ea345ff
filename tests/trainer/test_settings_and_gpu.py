"""Trainer settings (the shared checkpoint directory) and, where a GPU exists, a CUDA session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from opentinker_runtime.core.settings import load_settings
from opentinker_trainer.trainer import build_registry
from opentinker_trainer.session_factory import create_session
from opentinker_trainer.settings import TrainerSettings
from tests.trainer.helpers import CE, rows_close, sft_datums, spec


def test_checkpoint_dir_is_read_from_the_shared_variable() -> None:
    assert load_settings(TrainerSettings, {"OPENTINKER_AUTH": "disabled"}).checkpoint_dir == Path(".opentinker/checkpoints")
    settings = load_settings(TrainerSettings, {"OPENTINKER_AUTH": "disabled", "OPENTINKER_CHECKPOINT_DIR": "/srv/ckpt"})
    assert settings.checkpoint_dir == Path("/srv/ckpt")


def test_registry_resolves_the_checkpoint_dir_and_picks_the_device(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    registry = build_registry(Path("rel/ckpt"))
    assert registry.checkpoint_root == tmp_path / "rel" / "ckpt"
    assert registry.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert not (tmp_path / "rel").exists(), "created on the first save, not at start-up"


@pytest.mark.gpu
def test_a_cuda_session_matches_the_cpu_session(tmp_path) -> None:
    cpu = create_session("cpu", spec(), checkpoint_root=tmp_path)
    gpu = create_session("gpu", spec(), checkpoint_root=tmp_path, device="cuda", device_ids=("cuda:0",))
    for s in (cpu, gpu):
        s.forward_backward(sft_datums(), CE)
        s.optim_step()
    tokens = [d.tokens for d in sft_datums()]
    assert rows_close(gpu.compute_logprobs(tokens, reference=False, temperature=1.0),
                      cpu.compute_logprobs(tokens, reference=False, temperature=1.0), atol=1e-3)
