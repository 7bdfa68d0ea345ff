"""Artifact (domain) -> scheduler.v1.Artifact."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_scheduler.artifacts import Artifact, ArtifactFile

KINDS = {"checkpoint": pb.Artifact.KIND_CHECKPOINT, "output": pb.Artifact.KIND_OUTPUT}


def artifact_file_to_proto(file: ArtifactFile) -> pb.ArtifactFile:
    return pb.ArtifactFile(path=file.path, size_bytes=file.size_bytes, sha256=file.sha256)


def artifact_to_proto(artifact: Artifact) -> pb.Artifact:
    return pb.Artifact(artifact_id=artifact.artifact_id, job_id=artifact.job_id, kind=KINDS[artifact.kind],
                       format=artifact.format, step=artifact.step, size_bytes=artifact.size_bytes,
                       files=[artifact_file_to_proto(f) for f in artifact.files],
                       loadable_dirs=list(artifact.loadable_dirs))
