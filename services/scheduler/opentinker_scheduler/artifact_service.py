"""Listing and downloading a job's artifacts for its tenant (see `artifacts`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from opentinker_scheduler.artifacts import Artifact, ArtifactFile, ArtifactStore, files_under, job_of_artifact, read_chunks
from opentinker_scheduler.convert_jobs import inference_output_of
from opentinker_scheduler.event_log import EventLog
from opentinker_scheduler.events import MetricsReported
from opentinker_scheduler.jobs import JobService
from opentinker_scheduler.model import Caller, Page
from opentinker_scheduler.paging import decode_offset, encode_token, page_size


@dataclass(frozen=True, kw_only=True)
class ArtifactService:
    jobs: JobService
    store: ArtifactStore

    async def list(self, job_id: str, caller: Caller, *, size: int = 0, token: str = "") -> Page:
        """A page of the job's artifacts; NOT_FOUND for another tenant's job (an admin key sees
        every job's). The token is the position in the listing (checkpoints by step, outputs)."""
        wanted = page_size(size)
        start = decode_offset("artifacts", token)
        job = await self.jobs.get(job_id, caller)
        every = await self.store.list(job, inference_output_of(job))
        end = start + wanted
        return Page(items=list(every[start:end]),
                    next_page_token=encode_token("artifacts", str(end)) if end < len(every) else "")

    async def open(self, artifact_id: str, path_prefix: str, caller: Caller) -> tuple[Artifact, tuple[ArtifactFile, ...]]:
        """The artifact and its files under `path_prefix`; NOT_FOUND for another tenant's."""
        job = await self.jobs.get(job_of_artifact(artifact_id), caller)
        artifact = await self.store.find(job, inference_output_of(job), artifact_id)
        return artifact, files_under(artifact, path_prefix)

    @staticmethod
    async def download(artifact: Artifact, files: tuple[ArtifactFile, ...]) -> AsyncIterator[tuple[ArtifactFile | None, bytes]]:
        """(file, b"") when a file starts, then (None, chunk) for each of its chunks."""
        for file in files:
            yield file, b""
            async for chunk in read_chunks(artifact, file):
                yield None, chunk


def metrics_source(events: EventLog):  # noqa: ANN201
    """ArtifactStore.metrics_of over a job's stored events."""
    async def metrics_of(job_id: str) -> list[dict]:
        return [{"step": e.payload.step, "agent_id": e.payload.agent_id, "time_ms": e.time_ms, **e.payload.values}
                async for e in events.replay(job_id, 0) if isinstance(e.payload, MetricsReported)]
    return metrics_of
