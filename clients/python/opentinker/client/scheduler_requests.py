"""The Scheduler requests the blocking and the asyncio clients send (built in one place)."""

from __future__ import annotations

import uuid

from opentinker_api.common.v1 import model_pb2
from opentinker_api.scheduler.v1 import job_pb2, tenant_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client.spec import job_spec_from_dict

TERMINAL_STATES = (job_pb2.Job.STATE_SUCCEEDED, job_pb2.Job.STATE_FAILED, job_pb2.Job.STATE_CANCELLED)


def normalize_address(url: str) -> str:
    for scheme in ("grpc://", "http://", "dns:///"):
        url = url.removeprefix(scheme)
    return url.rstrip("/")


def state_name(state: int) -> str:
    return job_pb2.Job.State.Name(state).removeprefix("STATE_")


def ended(job: job_pb2.Job) -> job_pb2.Job:
    """`job`, checked to have ended (a watch stream that closes early is an error, not an end)."""
    from opentinker.client.errors import OpenTinkerError

    if job.state not in TERMINAL_STATES:
        raise OpenTinkerError(f"event stream of {job.job_id} ended while the job is {state_name(job.state)}")
    return job


def bearer_metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


def submit_request(spec: job_pb2.JobSpec | dict, request_id: str | None) -> pb.SubmitJobRequest:
    message = job_spec_from_dict(spec) if isinstance(spec, dict) else spec
    return pb.SubmitJobRequest(request_id=request_id or str(uuid.uuid4()), spec=message)


def cancel_request(job_id: str, reason: str, request_id: str | None) -> pb.CancelJobRequest:
    return pb.CancelJobRequest(job_id=job_id, request_id=request_id or str(uuid.uuid4()), reason=reason)


def quota(*, max_devices: int = 0, max_concurrent_jobs: int = 0, max_queued_jobs: int = 0) -> tenant_pb2.Quota:
    return tenant_pb2.Quota(max_devices=max_devices, max_concurrent_jobs=max_concurrent_jobs,
                            max_queued_jobs=max_queued_jobs)


def inference_spec(*, model: model_pb2.ModelReference | dict, env_name: str, num_episodes: int,
                   output_path: str, env_config: dict | None, envhost_address: str,
                   max_new_tokens: int) -> dict:
    model_dict = model if isinstance(model, dict) else message_dict(model)
    return {
        "type": "INFERENCE",
        "policy": {"model": model_dict, "sampling": {"max_new_tokens": max_new_tokens}},
        "environment": {"env_name": env_name, "config": env_config or {}, "envhost_address": envhost_address},
        "inference": {"num_episodes": num_episodes, "output_path": output_path},
    }


def message_dict(message) -> dict:  # noqa: ANN001 - any protobuf message
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)
