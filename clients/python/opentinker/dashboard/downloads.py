"""Serving an artifact's files over HTTP: one file as itself, several as a tar stream.

The files come from the Scheduler's DownloadArtifact stream and are passed on as they arrive
(nothing is held in memory but a chunk); each file's bytes are checked against its SHA-256 on
the way, and a mismatch cuts the response off (the browser sees a failed download, never a
wrong file).
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator
from typing import BinaryIO

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb


class CorruptDownload(Exception):
    """A file's bytes did not match its checksum; the response must be cut off."""


class _FileReader:
    """A file object over one file's chunks of the stream (what tarfile.addfile reads)."""

    def __init__(self, header: pb.ArtifactFile, chunks: Iterator[bytes]) -> None:
        self.header, self.chunks = header, chunks
        self.buffer, self.digest, self.size = b"", hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.digest.update(chunk)
            self.size += len(chunk)
            self.buffer += chunk
        data, self.buffer = (self.buffer, b"") if size < 0 else (self.buffer[:size], self.buffer[size:])
        return data

    def check(self) -> None:
        self.read()
        if self.size != self.header.size_bytes or self.digest.hexdigest() != self.header.sha256:
            raise CorruptDownload(f"{self.header.path}: checksum mismatch")


def files_of(stream: Iterator[pb.DownloadArtifactResponse]) -> Iterator[_FileReader]:
    """The stream split into files, each read to its end before the next starts."""
    pending = next(stream, None)
    while pending is not None:
        header = pending.file
        following: list[pb.DownloadArtifactResponse] = []

        def chunks() -> Iterator[bytes]:
            for message in stream:
                if message.HasField("file"):
                    following.append(message)
                    return
                yield message.data

        reader = _FileReader(header, chunks())
        yield reader
        reader.check()
        pending = following[0] if following else None


def download_name(artifact_id: str, prefix: str, files: list[pb.ArtifactFile]) -> str:
    """The file name a browser saves: the file's own, or `<artifact>[-<dir>].tar`."""
    if len(files) == 1:
        return files[0].path.rsplit("/", 1)[-1]
    return f"{artifact_id.replace('/', '_')}{'-' + prefix if prefix else ''}.tar"


def write_single(stream: Iterator[pb.DownloadArtifactResponse], out: BinaryIO) -> None:
    for reader in files_of(stream):
        while data := reader.read(1 << 20):
            out.write(data)


def write_tar(stream: Iterator[pb.DownloadArtifactResponse], out: BinaryIO) -> None:
    """A tar of the files by their paths in the artifact (`model/config.json`, ...)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for reader in files_of(stream):
            info = tarfile.TarInfo(reader.header.path)
            info.size, info.mode = reader.header.size_bytes, 0o644
            tar.addfile(info, reader)
