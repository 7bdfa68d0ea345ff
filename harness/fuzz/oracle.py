"""The oracle of the RPC fuzzing (harness/fuzz/rpcs.py): is one call's outcome acceptable?

* the status is OK or a canonical "user" code (USER_CODES); DEADLINE_EXCEEDED only for RPCs
  that wait by design (WAITING_RPCS: they get a short deadline) or whose valid work can outlast
  a deadline (WORK_RPCS: generation, forward/backward), CANCELLED only when we cancelled a
  stream after reading enough of it; never UNKNOWN, INTERNAL, UNAVAILABLE or DATA_LOSS;
* a stream that promises one answer per request (ONE_ANSWER_PER_REQUEST: Interact) gives
  exactly that many when it ends OK;
* RESOURCE_EXHAUSTED is the service's (a quota, a request over 4 MiB), not our client's
  transport refusing its answer (TRANSPORT_LIMITS: trailers over 16 KiB, a response over 4 MiB);
* a call with a tenant's key (the tenant pass, harness/fuzz/tenant.py) never succeeds on an
  admin-only RPC (`admin_only`: the worker services' RPCs, ADMIN_ONLY_SCHEDULER_RPCS);
* an INVALID_ARGUMENT message names the offending field: it starts with a field path of the
  request (`field_path_problem`: dot-separated field or oneof names of the request type, each
  with optional [index] or [map key], then ':' or a space), e.g.
  `spec.policy.algorithm.optimizer.learning_rate: ...` or `datums[3].loss_mask: ...`; inside
  a google.protobuf.Struct (a config) any key continues a path; `request` names the whole
  message (bytes that do not decode).

KNOWN_FINDINGS are failures in code this work may not change, reported to its owner: a matching
failure is listed apart (printed by the CI test, failing the bench unless --ignore-known).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from harness.fuzz.strategies import STRUCT_TYPES, is_map

if TYPE_CHECKING:
    from harness.fuzz.rpcs import Case, Failure, Request, Rpc

USER_CODES = frozenset({
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED, grpc.StatusCode.UNIMPLEMENTED})
WAITING_RPCS = frozenset({"SchedulerService.WatchJob", "CoordinatorService.WatchRun",
                          "CoordinatorService.AwaitTurn", "CoordinatorService.ArriveAtBarrier"})
"""RPCs that wait by design (a live stream, a turn, a barrier): DEADLINE_EXCEEDED is their answer
to our short deadline, not a hang."""
WORK_RPCS = frozenset({"RolloutService.Sample", "RolloutService.RunEpisodes", "TrainerService.ForwardBackward",
                       "TrainerService.ComputeLogprobs"})
"""RPCs whose work grows with a valid request (thousands of prompts or datums, 256 new tokens
each): past their deadline they may legitimately run; the known-good request that follows
the batch shows the service did not hang."""
ADMIN_ONLY_SCHEDULER_RPCS = frozenset({
    "SchedulerService.ReportJobEvents", "SchedulerService.FinishJob", "SchedulerService.CreateTenant",
    "SchedulerService.ListTenants", "SchedulerService.UpdateTenantQuota", "SchedulerService.CreateApiKey",
    "SchedulerService.RevokeApiKey"})
"""The Scheduler's RPCs a tenant key may not use (a worker's calls, tenant and key administration)."""
ONE_ANSWER_PER_REQUEST = frozenset({"EnvHostService.Interact"})
"""Streams whose protocol answers every request exactly once (a failed one with an ErrorDetail)."""
WHOLE_REQUEST = "request"
TRANSPORT_LIMITS = ("metadata size exceeds", "CLIENT: Received message larger than max")
"""RESOURCE_EXHAUSTED raised by our own client, not the service: a status message too long for the
trailers (16 KiB), or a response over 4 MiB. "SERVER: Received message larger than max" (our
request over 4 MiB) is the service's legitimate answer."""


@dataclass(frozen=True)
class Outcome:
    """How one call ended; `responses` read from a stream, `requests` sent on one."""

    code: grpc.StatusCode
    details: str
    seconds: float
    responses: int = 0
    cancelled_by_us: bool = False
    requests: int = 1


INDEX_PART = r"""\[(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\]'"]*)\]"""  # [3], ['a]b'], ["it's"]
PATH_PART = rf"[A-Za-z_]\w*(?:{INDEX_PART})*"  # a field name, then indexes or map keys: datums[3], labels['a b']
PATH_HEAD = re.compile(rf"^\s*({PATH_PART}(?:\.{PATH_PART})*)(?=[:\s]|$)")
INDEX = re.compile(INDEX_PART)


def field_path_problem(request: Descriptor, details: str) -> str | None:
    """None when `details` starts with a field path of `request` (`a.b[2].c`, map keys in [],
    then ':' or a space), or with `request` (the whole message); else why not."""
    match = PATH_HEAD.match(details)
    if not match:
        return "the message does not start with a field path"
    head = INDEX.sub("", match.group(1))
    if head == WHOLE_REQUEST:
        return None
    descriptor: Descriptor | None = request
    for part in head.split("."):
        if descriptor is None or descriptor.full_name in STRUCT_TYPES:
            return None  # inside a Struct (a config), any key is a path
        names = {f.name: f for f in descriptor.fields} | {o.name: None for o in descriptor.oneofs}
        if part not in names:
            return f"{part!r} (in {head!r}) is not a field of {descriptor.name}"
        descriptor = _next_descriptor(names[part])
    return None


def _next_descriptor(field_: Any) -> Descriptor | None:
    if field_ is None or field_.message_type is None:
        return None
    if is_map(field_):
        value = field_.message_type.fields_by_name["value"]
        return value.message_type
    return field_.message_type


def admin_only(rpc: Rpc) -> bool:
    """Only OpenTinker's own (admin) keys may succeed: every RPC of the worker services, and the
    Scheduler's ADMIN_ONLY_SCHEDULER_RPCS."""
    return rpc.service != "scheduler" or rpc.name in ADMIN_ONLY_SCHEDULER_RPCS


def verdict(rpc: Rpc, outcome: Outcome, *, tenant_key: bool = False) -> str | None:
    """None when the outcome is acceptable, else what is wrong with it (`tenant_key`: the call
    carried a tenant's key, which never succeeds on an admin-only RPC)."""
    code = outcome.code
    if tenant_key and code is grpc.StatusCode.OK and admin_only(rpc):
        return "a tenant key succeeded on an admin-only RPC"
    if code is grpc.StatusCode.CANCELLED and outcome.cancelled_by_us:
        return None
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and rpc.may_outlive_deadline:
        return None
    if code not in USER_CODES:
        return f"answered {code.name}"
    if code is grpc.StatusCode.OK and rpc.name in ONE_ANSWER_PER_REQUEST and outcome.responses != outcome.requests:
        return f"answered {outcome.responses} of {outcome.requests} requests with OK (one answer per request)"
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        problem = field_path_problem(rpc.request, outcome.details)
        return f"INVALID_ARGUMENT does not name the field: {problem}" if problem else None
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and any(sign in outcome.details for sign in TRANSPORT_LIMITS):
        return "RESOURCE_EXHAUSTED from our client's transport: the answer broke a gRPC limit, its real code was lost"
    return None


# -- findings reported to the owners of code this work may not change ------------------------

def holds_non_finite_struct_number(request: Request) -> bool:
    """True when a google.protobuf.Value anywhere in the request holds NaN or +-Infinity."""
    items = request if isinstance(request, list) else [request]
    return any(isinstance(item, Message) and _non_finite_in(item) for item in items)


def _non_finite_in(message: Message) -> bool:
    if message.DESCRIPTOR.full_name == "google.protobuf.Value" and message.WhichOneof("kind") == "number_value":
        return not math.isfinite(message.number_value)  # type: ignore[attr-defined]
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        if is_map(descriptor):
            values = list(value.values())
        else:
            values = list(value) if descriptor.is_repeated else [value]
        if any(isinstance(item, Message) and _non_finite_in(item) for item in values):
            return True
    return False


@dataclass(frozen=True)
class KnownFinding:
    """A failure in code this work may not change, reported with a reproducer to its owner."""

    rpc_prefix: str
    note: str
    details_contain: str = ""
    problem_contains: str = ""
    needs_non_finite_struct: bool = False

    def matches(self, failure: Failure, case: Case) -> bool:
        return (failure.rpc.startswith(self.rpc_prefix) and self.details_contain in failure.details
                and self.problem_contains in failure.problem
                and (not self.needs_non_finite_struct or holds_non_finite_struct_number(case.request)))


KNOWN_FINDINGS: tuple[KnownFinding, ...] = ()
