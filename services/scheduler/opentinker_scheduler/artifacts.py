"""A job's artifacts: what its tenant can list and download (no grpc).

* **Checkpoints**: the directories a Trainer saved for the job under the shared checkpoint root,
  named `<job_id>-<name>` (`job-<hex>-final`, `job-<hex>-step-5`) with a manifest naming the job.
  A checkpoint holds `model/` (an HF model directory), `adapter/` (a PEFT adapter directory) and/or
  `training_state.pt`.
* **Outputs**: an INFERENCE job's JSONL, in its tenant's area (`<tenant data dir>/<tenant>/outputs/`,
  where the Coordinator writes it; an absolute output path, an admin's choice, is not served), and
  `metrics.jsonl`, every metrics event of the job, rendered from its event log.

Ids: a checkpoint's id, or `<job_id>/<file name>` for an output. An id only ever leads to a file
of the listing of its job (computed afresh, files only, symlinks skipped), so no id names a path.
SHA-256 sums are cached by (path, size, mtime): a checkpoint never changes once renamed into place.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from opentinker_runtime.ml.checkpoints import MANIFEST_FILE
from opentinker_scheduler.errors import InvalidArgument, NotFound
from opentinker_scheduler.model import Job

CHECKPOINT_ID = re.compile(r"^(job-[0-9a-f]{32})-([A-Za-z0-9._-]{1,160})$")
OUTPUT_ID = re.compile(r"^(job-[0-9a-f]{32})/([A-Za-z0-9._-]{1,200})$")
CHUNK_BYTES = 1 << 20
METRICS_FILE = "metrics.jsonl"
LOADABLE_DIRS = ("adapter", "model")
CHECKSUM_CACHE_SIZE = 4096


@dataclass(frozen=True, kw_only=True)
class ArtifactFile:
    path: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Artifact:
    artifact_id: str
    job_id: str
    kind: str  # "checkpoint" or "output"
    format: str
    step: int = 0
    files: tuple[ArtifactFile, ...] = ()
    loadable_dirs: tuple[str, ...] = ()
    root: Path | None = None
    """Where the files are (None: `content` is the one file's bytes)."""
    content: bytes | None = None

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)


def job_of_artifact(artifact_id: str) -> str:
    """The job an artifact id belongs to; INVALID_ARGUMENT for an id of neither form."""
    match = CHECKPOINT_ID.match(artifact_id) or OUTPUT_ID.match(artifact_id)
    if match is None:
        raise InvalidArgument("artifact_id", f"{artifact_id!r} is not an artifact id: a checkpoint id "
                              "('job-<32 hex>-final') or '<job_id>/<file name>' (see ListArtifacts)")
    return match.group(1)


MetricsSource = Callable[[str], Awaitable[list[dict]]]
"""The metrics events of a job as dicts (step, agent_id, time_ms, values), oldest first."""


@dataclass(kw_only=True)
class ArtifactStore:
    checkpoint_root: Path | None
    tenant_data_dir: Path | None
    metrics_of: MetricsSource
    _sums: OrderedDict[tuple[str, int, int], str] = field(default_factory=OrderedDict)

    async def list(self, job: Job, inference_output: str | None) -> list[Artifact]:
        """Checkpoints by step, then outputs. `inference_output`: where an INFERENCE job writes
        (relative to its tenant's outputs/, the default name applied), None for other jobs."""
        checkpoints = await asyncio.to_thread(self._checkpoints, job.job_id)
        outputs = await asyncio.to_thread(self._inference_output, job, inference_output)
        metrics = await self._metrics(job.job_id)
        return sorted(checkpoints, key=lambda a: (a.step, a.artifact_id)) + outputs + metrics

    async def find(self, job: Job, inference_output: str | None, artifact_id: str) -> Artifact:
        """The artifact `artifact_id` of the job's listing; only metrics.jsonl reads the event log."""
        if artifact_id == f"{job.job_id}/{METRICS_FILE}":
            candidates = await self._metrics(job.job_id)
        else:
            candidates = await asyncio.to_thread(self._checkpoints, job.job_id)
            candidates += await asyncio.to_thread(self._inference_output, job, inference_output)
        for artifact in candidates:
            if artifact.artifact_id == artifact_id:
                return artifact
        raise NotFound(f"artifact {artifact_id} not found (ListArtifacts lists job {job.job_id}'s artifacts)")

    # -- checkpoints ----------------------------------------------------------------------------

    def _checkpoints(self, job_id: str) -> list[Artifact]:
        root = self.checkpoint_root
        if root is None or not root.is_dir():
            return []
        found = []
        for entry in os.scandir(root):
            if entry.name.startswith(f"{job_id}-") and entry.is_dir(follow_symlinks=False):
                if (artifact := self._checkpoint(job_id, Path(entry.path))) is not None:
                    found.append(artifact)
        return found

    def _checkpoint(self, job_id: str, directory: Path) -> Artifact | None:
        try:
            manifest = json.loads((directory / MANIFEST_FILE).read_text())
        except (OSError, ValueError):
            return None  # not (yet) a checkpoint: being written, or something else
        if not isinstance(manifest, dict) or manifest.get("job_id") != job_id:
            return None
        files = self._files(directory)
        present = {f.path.split("/", 1)[0] for f in files}
        return Artifact(artifact_id=directory.name, job_id=job_id, kind="checkpoint",
                        format=str(manifest.get("format", "")), step=int(manifest.get("step", 0) or 0),
                        files=files, loadable_dirs=tuple(d for d in LOADABLE_DIRS if d in present), root=directory)

    def _files(self, directory: Path) -> tuple[ArtifactFile, ...]:
        files = []
        for top, dirs, names in os.walk(directory, followlinks=False):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(top, d)))
            for name in sorted(names):
                path = Path(top) / name
                if path.is_symlink() or not path.is_file():
                    continue
                try:
                    files.append(self._described(path, path.relative_to(directory).as_posix()))
                except FileNotFoundError:
                    continue  # deleted while listed
        return tuple(files)

    def _described(self, path: Path, relative: str) -> ArtifactFile:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if (digest := self._sums.get(key)) is None:
            digest = _sha256_of(path)
            self._sums[key] = digest
            while len(self._sums) > CHECKSUM_CACHE_SIZE:
                self._sums.popitem(last=False)
        return ArtifactFile(path=relative, size_bytes=stat.st_size, sha256=digest)

    # -- outputs --------------------------------------------------------------------------------

    def _inference_output(self, job: Job, output: str | None) -> list[Artifact]:
        path = self._output_path(job, output)
        if path is None:
            return []
        return [Artifact(artifact_id=f"{job.job_id}/{path.name}", job_id=job.job_id, kind="output", format="jsonl",
                         files=(self._described(path, path.name),), root=path.parent)]

    def _output_path(self, job: Job, output: str | None) -> Path | None:
        """The INFERENCE output inside the tenant's outputs/ (None: no such file, or elsewhere)."""
        if output is None or self.tenant_data_dir is None or output.startswith("/"):
            return None
        area = (self.tenant_data_dir / job.tenant_id / "outputs").resolve()
        path = (area / output).resolve()
        if not path.is_relative_to(area) or not path.is_file() or not OUTPUT_ID.match(f"{job.job_id}/{path.name}"):
            return None
        return path

    async def _metrics(self, job_id: str) -> list[Artifact]:
        events = await self.metrics_of(job_id)
        if not events:
            return []
        content = "".join(json.dumps(event, sort_keys=True) + "\n" for event in events).encode()
        digest = hashlib.sha256(content).hexdigest()
        return [Artifact(artifact_id=f"{job_id}/{METRICS_FILE}", job_id=job_id, kind="output", format="jsonl",
                         files=(ArtifactFile(path=METRICS_FILE, size_bytes=len(content), sha256=digest),),
                         content=content)]


def files_under(artifact: Artifact, prefix: str) -> tuple[ArtifactFile, ...]:
    """The artifact's files under directory `prefix` ("" = all); NOT_FOUND when there are none."""
    prefix = prefix.strip("/")
    if not prefix:
        return artifact.files
    chosen = tuple(f for f in artifact.files if f.path == prefix or f.path.startswith(f"{prefix}/"))
    if not chosen:
        tops = sorted({f.path.split("/", 1)[0] for f in artifact.files})
        raise NotFound(f"artifact {artifact.artifact_id} has no files under {prefix!r}; it holds: {', '.join(tops)}")
    return chosen


async def read_chunks(artifact: Artifact, file: ArtifactFile) -> AsyncIterator[bytes]:
    """The file's bytes in chunks of at most CHUNK_BYTES (read in a thread: the loop stays free)."""
    if artifact.content is not None:
        for start in range(0, len(artifact.content), CHUNK_BYTES):
            yield artifact.content[start:start + CHUNK_BYTES]
        return
    assert artifact.root is not None
    try:
        with open(artifact.root / file.path, "rb") as handle:  # noqa: ASYNC230 - reads below run in a thread
            while chunk := await asyncio.to_thread(handle.read, CHUNK_BYTES):
                yield chunk
    except FileNotFoundError:
        raise NotFound(f"artifact {artifact.artifact_id} was deleted while it was read ({file.path})") from None


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
