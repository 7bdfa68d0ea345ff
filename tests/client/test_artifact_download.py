"""Writing a DownloadArtifact stream: every file checked against its SHA-256, nothing outside the
destination, a prefix dropped from the paths it was asked for."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client.artifacts import ArtifactCorrupt, save_stream


def stream(files: dict[str, bytes], *, chunk: int = 3, lie_about: str = "") -> list[pb.DownloadArtifactResponse]:
    messages = []
    for path, data in files.items():
        digest = hashlib.sha256(b"other" if path == lie_about else data).hexdigest()
        messages.append(pb.DownloadArtifactResponse(file=pb.ArtifactFile(path=path, size_bytes=len(data), sha256=digest)))
        messages += [pb.DownloadArtifactResponse(data=data[i:i + chunk]) for i in range(0, len(data), chunk)]
    return messages


def test_files_land_under_the_destination_without_the_prefix_asked_for(tmp_path: Path) -> None:
    files = {"adapter/adapter_config.json": b'{"r": 8}', "adapter/weights/a.bin": b"0123456789", "adapter/empty": b""}
    written = save_stream(stream(files), tmp_path / "out", "adapter/")
    assert [p.relative_to(tmp_path / "out").as_posix() for p in written] == ["adapter_config.json", "weights/a.bin", "empty"]
    assert (tmp_path / "out" / "weights" / "a.bin").read_bytes() == b"0123456789"
    whole = save_stream(stream(files), tmp_path / "whole")
    assert (tmp_path / "whole" / "adapter" / "adapter_config.json").read_bytes() == b'{"r": 8}' and len(whole) == 3


def test_a_file_whose_bytes_do_not_match_its_checksum_is_refused_and_not_left_behind(tmp_path: Path) -> None:
    files = {"good.txt": b"fine", "bad.bin": b"tampered bytes"}
    with pytest.raises(ArtifactCorrupt, match="bad.bin.*download again"):
        save_stream(stream(files, lie_about="bad.bin"), tmp_path)
    assert (tmp_path / "good.txt").read_bytes() == b"fine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.txt"]  # no bad.bin, no .partial


def test_a_stream_cut_short_leaves_no_partial_file(tmp_path: Path) -> None:
    messages = stream({"model.safetensors": b"x" * 30}, chunk=10)[:2]  # the header and one chunk of three
    with pytest.raises(ArtifactCorrupt, match="got 10 bytes"):
        save_stream(messages, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", ""])
def test_a_path_that_would_lead_out_of_the_destination_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ArtifactCorrupt, match="refusing artifact file path"):
        save_stream(stream({path: b"x"}), tmp_path / "out")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "out").exists()
