"""The Python SDK: submit, watch and cancel jobs; no torch needed."""

from opentinker.client.errors import (
    AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, OpenTinkerError, Unauthenticated, Unavailable,
)
from opentinker.client.scheduler_client import InferenceSchedulerClient, SchedulerClient
from opentinker.client.service_client import FitResult, ServiceClient
from opentinker.client.spec import job_spec_from_dict, load_job_spec

__all__ = [
    "AlreadyExists", "FailedPrecondition", "FitResult", "InferenceSchedulerClient", "InvalidArgument", "NotFound",
    "OpenTinkerError", "SchedulerClient", "ServiceClient", "Unauthenticated", "Unavailable", "job_spec_from_dict",
    "load_job_spec",
]
