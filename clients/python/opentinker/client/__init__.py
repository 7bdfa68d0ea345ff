"""The Python SDK: submit, watch and cancel jobs, write your own loops; no torch needed.

    from opentinker.client import ServiceClient, SchedulerClient, TrainingClient, SamplingClient
"""

from opentinker.client.async_client import AsyncSchedulerClient, AsyncServiceClient
from opentinker.client.errors import (
    Aborted, AlreadyExists, Cancelled, DeadlineExceeded, FailedPrecondition, Internal, InvalidArgument, NotFound,
    OpenTinkerError, PermissionDenied, ResourceExhausted, Unauthenticated, Unavailable, Unimplemented,
)
from opentinker.client.primitives import ForwardBackwardResult, OptimStepResult, SamplingClient, TrainingClient, datum
from opentinker.client.retry import RetryPolicy
from opentinker.client.scheduler_client import InferenceSchedulerClient, SchedulerClient, state_name
from opentinker.client.service_client import FitResult, ServiceClient
from opentinker.client.spec import SpecError, job_spec_from_dict, load_job_spec

__all__ = [
    "Aborted", "AlreadyExists", "AsyncSchedulerClient", "AsyncServiceClient", "Cancelled", "DeadlineExceeded",
    "FailedPrecondition", "FitResult", "ForwardBackwardResult", "InferenceSchedulerClient", "Internal",
    "InvalidArgument", "NotFound", "OpenTinkerError", "OptimStepResult", "PermissionDenied", "ResourceExhausted",
    "RetryPolicy", "SamplingClient", "SchedulerClient", "ServiceClient", "SpecError", "TrainingClient",
    "Unauthenticated", "Unavailable", "Unimplemented", "datum", "job_spec_from_dict", "load_job_spec", "state_name",
]
