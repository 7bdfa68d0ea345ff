"""Checkpoint directories: ids, manifests, atomic writes and the shared settings field."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

from opentinker_runtime.core.settings import ServiceSettings, load_settings
from opentinker_runtime.ml import checkpoints
from opentinker_runtime.ml.checkpoints import CheckpointFormat, CheckpointManifest, checkpoint_dir_setting
from opentinker_runtime.ml.errors import CheckpointError, CheckpointNotFoundError
from opentinker_runtime.ml.sources import LoraSpec, ModelSource


@dataclasses.dataclass(frozen=True, kw_only=True)
class SomeSettings(ServiceSettings):
    ENV_PREFIX: ClassVar[str] = "OPENTINKER_SOME_"
    checkpoint_dir: Path = checkpoint_dir_setting()


def manifest(checkpoint_id: str = "job-1-step-3") -> CheckpointManifest:
    return CheckpointManifest(checkpoint_id=checkpoint_id, format=CheckpointFormat.TRAINING_STATE,
                              base=ModelSource.builtin("tiny-llama", 4),
                              lora=LoraSpec(rank=4, target_modules=("q_proj",)), step=3,
                              policy_version=3, session_id="sess-1", job_id="job-1")


def test_checkpoint_dir_comes_from_the_shared_variable() -> None:
    assert load_settings(SomeSettings, {"OPENTINKER_AUTH": "disabled"}).checkpoint_dir == Path(".opentinker/checkpoints")
    settings = load_settings(SomeSettings, {"OPENTINKER_AUTH": "disabled", "OPENTINKER_CHECKPOINT_DIR": "/data/ckpt"})
    assert settings.checkpoint_dir == Path("/data/ckpt")


@pytest.mark.parametrize("bad", ["", "../escape", "a/b", ".hidden", "x" * 201, "sp ace"])
def test_unsafe_ids_are_refused(tmp_path, bad: str) -> None:
    with pytest.raises(CheckpointError, match="checkpoint id"):
        checkpoints.checkpoint_path(tmp_path, bad)


def test_manifest_round_trips_through_the_directory(tmp_path) -> None:
    written = manifest()
    with checkpoints.writing_checkpoint(tmp_path, "job-1-step-3") as staging:
        checkpoints.write_manifest(staging, written)
        assert not (tmp_path / "job-1-step-3").exists(), "invisible until complete"
    assert checkpoints.read_manifest(tmp_path, "job-1-step-3") == written


def test_a_failed_write_leaves_nothing_and_keeps_the_old_checkpoint(tmp_path) -> None:
    with checkpoints.writing_checkpoint(tmp_path, "c1") as staging:
        checkpoints.write_manifest(staging, manifest("c1"))
    with pytest.raises(RuntimeError), checkpoints.writing_checkpoint(tmp_path, "c1") as staging:
        (staging / "partial").write_text("x")
        raise RuntimeError("disk full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c1"]
    assert checkpoints.read_manifest(tmp_path, "c1").checkpoint_id == "c1"


def test_missing_and_corrupt_manifests(tmp_path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint 'nope'"):
        checkpoints.read_manifest(tmp_path, "nope")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not a valid manifest"):
        checkpoints.read_manifest(tmp_path, "bad")
