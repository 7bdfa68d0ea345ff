"""Writing a DownloadArtifact stream to a directory: each file checked against its SHA-256.

A file is written beside its place under a temporary name and renamed into place once its bytes
match the checksum the Scheduler listed; a mismatch raises ArtifactCorrupt and leaves nothing
of that file. Paths are the artifact's own (relative, no '..'); with a `path_prefix` the files
land under `destination` without it (`adapter/adapter_config.json` -> `DIR/adapter_config.json`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client.errors import OpenTinkerError


class ArtifactCorrupt(OpenTinkerError):
    """A downloaded file's bytes did not match its listed size or SHA-256."""


def local_path(destination: Path, remote: str, path_prefix: str) -> Path:
    """Where the artifact's file `remote` goes; ArtifactCorrupt for a path that would lead out."""
    parts = PurePosixPath(remote).parts
    if PurePosixPath(remote).is_absolute() or ".." in parts or not parts:
        raise ArtifactCorrupt(f"refusing artifact file path {remote!r}: not a relative path inside the artifact")
    prefix = PurePosixPath(path_prefix.strip("/")).parts
    if prefix and parts[:len(prefix)] == prefix and len(parts) > len(prefix):
        parts = parts[len(prefix):]
    return destination.joinpath(*parts)


class _FileWriter:
    def __init__(self, header: pb.ArtifactFile, target: Path) -> None:
        self.header, self.target = header, target
        target.parent.mkdir(parents=True, exist_ok=True)
        self.partial = target.with_name(f".{target.name}.partial")
        self.handle = open(self.partial, "wb")
        self.digest, self.size = hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.digest.update(data)
        self.size += len(data)

    def finish(self) -> Path:
        self.handle.close()
        if self.size != self.header.size_bytes or self.digest.hexdigest() != self.header.sha256:
            self.partial.unlink(missing_ok=True)
            raise ArtifactCorrupt(f"{self.header.path}: got {self.size} bytes with SHA-256 {self.digest.hexdigest()}, "
                                  f"expected {self.header.size_bytes} bytes with {self.header.sha256}; download again")
        os.replace(self.partial, self.target)
        return self.target

    def abandon(self) -> None:
        self.handle.close()
        self.partial.unlink(missing_ok=True)


class StreamWriter:
    """Writes the messages of one DownloadArtifact stream as they come (`feed`), then `finish`."""

    def __init__(self, destination: Path, path_prefix: str = "") -> None:
        self.destination, self.path_prefix = destination, path_prefix
        self.written: list[Path] = []
        self.current: _FileWriter | None = None

    def feed(self, response: pb.DownloadArtifactResponse) -> None:
        if response.HasField("file"):
            self._close_file()
            self.current = _FileWriter(response.file, local_path(self.destination, response.file.path,
                                                                 self.path_prefix))
        elif self.current is not None:
            self.current.write(response.data)

    def _close_file(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            self.written.append(current.finish())

    def finish(self) -> list[Path]:
        """The paths written, in order (ArtifactCorrupt when the last file's bytes do not match)."""
        self._close_file()
        return self.written

    def abandon(self) -> None:
        """Drop the file being written (the stream broke off)."""
        if self.current is not None:
            self.current.abandon()
            self.current = None


def save_stream(responses: Iterable[pb.DownloadArtifactResponse], destination: Path,
                path_prefix: str = "") -> list[Path]:
    """Write every file of the stream under `destination`; the paths written, in order."""
    writer = StreamWriter(destination, path_prefix)
    try:
        for response in responses:
            writer.feed(response)
        return writer.finish()
    finally:
        writer.abandon()
