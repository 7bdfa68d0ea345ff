"""The EnvHostService servicer: converts protobuf <-> domain objects around the SessionManager.

Errors are the EnvHost's DomainErrors (NOT_FOUND unknown environment or session,
INVALID_ARGUMENT bad config/kwargs/seat, RESOURCE_EXHAUSTED session limit, FAILED_PRECONDITION
step before reset / after done / broken session, DEADLINE_EXCEEDED a game call past the timeout,
INTERNAL a game that raised), mapped by the service edge (`opentinker_runtime.edge`): unary
calls carry the ErrorReason name in `opentinker-reason`, the kind of a game's failure in
`opentinker-env-error-kind` and its traceback in `opentinker-traceback-bin`; Interact answers the
failed request with an ErrorDetail {code, message, reason, traceback}.

Every call on a job's session, or opening one for a job, must carry that job's token (the
`job_token` declarations; Interact checks each request against the same scopes).

Structs: numbers arrive as doubles; whole ones are passed to games as ints (3.0 -> 3).
ResetRequest.seed 0 means "no seed" (put `seed` in kwargs to pass 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterable, Callable
from typing import Any

import grpc
import structlog

from opentinker_api.envhost.v1 import envhost_service_pb2 as pb
from opentinker_api.envhost.v1 import envhost_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.interceptor import current_job_tokens, current_principal
from opentinker_runtime.auth.job_tokens import hash_job_token
from opentinker_runtime.core.server import ServiceBinding
from opentinker_runtime.edge.handlers import servicer_base
from opentinker_runtime.edge.job_token import (
    JobScope,
    job_token,
    job_token_allowed_now,
    job_token_check_needed,
    job_token_refusal,
    presented_token,
    scoped_job,
)
from opentinker_runtime.edge.status import error_detail
from opentinker_env import StepResult
from opentinker_envhost import convert
from opentinker_envhost.errors import EnvHostError, InvalidArgument
from opentinker_envhost.interact import InteractPump, internal_error
from opentinker_envhost.sessions import ResetOutcome, SessionManager

log = structlog.get_logger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["EnvHostService"]
SERVICE_FULL_NAME = SERVICE.full_name
OPEN_SCOPE = JobScope(job_id="job_id")
"""OpenSession acts on the job it names."""
SESSION_SCOPE = JobScope(owner="session_id")
"""Calls on a session act on its job."""
INTERACT_SCOPES = {"open_session": OPEN_SCOPE, "reset": SESSION_SCOPE, "step": SESSION_SCOPE,
                   "close_session": SESSION_SCOPE}


class EnvHostServicer(servicer_base(pb_grpc.EnvHostServiceServicer, SERVICE)):  # type: ignore[misc]
    """Every EnvHostService RPC, over one SessionManager."""

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager
        self._closing: set[asyncio.Task[None]] = set()

    def job_of_owner(self, session_id: str) -> str:
        return self.manager.job_of(session_id)

    async def ListEnvironments(self, request: pb.ListEnvironmentsRequest,
                               context: grpc.aio.ServicerContext) -> pb.ListEnvironmentsResponse:
        specs, next_token = self.manager.catalog.page(request.page_size, request.page_token)
        return pb.ListEnvironmentsResponse(environments=[convert.environment(s) for s in specs],
                                           next_page_token=next_token)

    @job_token(OPEN_SCOPE)
    async def OpenSession(self, request: pb.OpenSessionRequest,
                          context: grpc.aio.ServicerContext) -> pb.OpenSessionResponse:
        return await self.open_session(request, attempt_of(context, request.job_id))

    @job_token(SESSION_SCOPE)
    async def Reset(self, request: pb.ResetRequest, context: grpc.aio.ServicerContext) -> pb.ResetResponse:
        return await self.reset(request)

    @job_token(SESSION_SCOPE)
    async def Step(self, request: pb.StepRequest, context: grpc.aio.ServicerContext) -> pb.StepResponse:
        return await self.step(request)

    @job_token(SESSION_SCOPE)
    async def CloseSession(self, request: pb.CloseSessionRequest,
                           context: grpc.aio.ServicerContext) -> pb.CloseSessionResponse:
        return await self.close_session(request)

    async def Interact(self, request_iterator: AsyncIterable[pb.InteractRequest],
                       context: grpc.aio.ServicerContext) -> None:
        """Read with context.read(), write with context.write() (`InteractPump`)."""
        bound: set[str] = set()  # sessions opened here with close_with_stream

        async def answer(request: pb.InteractRequest) -> pb.InteractResponse:
            response = await self.interact_once(request, context)
            if request.open_session.close_with_stream and response.HasField("open_session"):
                bound.add(response.open_session.session_id)
            return response

        try:
            await InteractPump(answer, context, functools.partial(self.interact_soon, context)).run()
        finally:
            if bound:  # in a task of its own: the stream's handler may be cancelled already
                self._closing.add(task := asyncio.get_running_loop().create_task(self._close_bound(bound)))
                task.add_done_callback(self._closing.discard)

    def interact_soon(self, context: grpc.aio.ServicerContext, request: pb.InteractRequest,
                      answer: Callable[[pb.InteractResponse], None]) -> bool:
        """Interact's fast path: a reset or step its session's game can take without a coroutine
        (`SessionManager.reset_soon`, `step_soon`), its job token already verified (no I/O), is
        answered from the game's reply callback; True when `request` was taken so."""
        kind = request.WhichOneof("action")
        if kind != "step" and kind != "reset":
            return False
        message = request.step if kind == "step" else request.reset
        if kind == "step" and message.truncated:
            return False  # a cut-off action (rare): the awaited path asks the game's on_truncated
        if job_token_check_needed() and not job_token_allowed_now(context, job_id=self.manager.job_of(message.session_id)):
            return False
        try:
            if kind == "step":
                return self.manager.step_soon(message.session_id, message.action,
                                              functools.partial(_answer_soon, request.sequence, answer, _fill_step),
                                              seat=message.seat)
            return self.manager.reset_soon(message.session_id, convert.struct_to_dict(message.kwargs, "kwargs"),
                                           functools.partial(_answer_soon, request.sequence, answer, _fill_reset),
                                           seed=message.seed or None)
        except EnvHostError as error:
            answer(pb.InteractResponse(sequence=request.sequence, error=error_detail(error)))
            return True

    async def _close_bound(self, session_ids: set[str]) -> None:
        """Close what a finished stream opened with close_with_stream (those still open)."""
        for session_id in sorted(session_ids):
            with contextlib.suppress(EnvHostError):  # closed already (CloseSession, the TTL)
                await self.manager.close(session_id)
                log.info("session_closed_with_its_stream", session_id=session_id)

    # -- shared by the unary RPCs and Interact ------------------------------------------------

    async def open_session(self, request: pb.OpenSessionRequest, attempt: str = "") -> pb.OpenSessionResponse:
        session = await self.manager.open(request.env_name, convert.struct_to_dict(request.config),
                                          job_id=request.job_id, request_id=request.request_id,
                                          attempt=attempt, tenant=current_principal().tenant_id)
        return pb.OpenSessionResponse(session_id=session.session_id,
                                      environment=convert.environment(session.spec))

    async def reset(self, request: pb.ResetRequest) -> pb.ResetResponse:
        outcome = await self.manager.reset(request.session_id, convert.struct_to_dict(request.kwargs, "kwargs"),
                                           seed=request.seed or None)
        return convert.reset_response(outcome)

    async def step(self, request: pb.StepRequest) -> pb.StepResponse:
        result = await self.manager.step(request.session_id, request.action, seat=request.seat,
                                         truncated=request.truncated)
        return convert.step_response(result)

    async def close_session(self, request: pb.CloseSessionRequest) -> pb.CloseSessionResponse:
        return pb.CloseSessionResponse(steps=await self.manager.close(request.session_id))

    async def interact_once(self, request: pb.InteractRequest,
                            context: grpc.aio.ServicerContext | None = None) -> pb.InteractResponse:
        """One Interact request -> its response (an ErrorDetail on a domain error or a refused
        job token: the stream goes on)."""
        kind = request.WhichOneof("action")
        try:
            if kind is None:
                raise InvalidArgument(f"action: set one of {', '.join(INTERACT_ACTIONS)}")
            message = getattr(request, kind)
            if context is not None and job_token_check_needed():
                job_id, _, field = scoped_job(INTERACT_SCOPES[kind], message, self)
                refusal = await job_token_refusal(context, job_id=job_id, field=field)
                if refusal:
                    return pb.InteractResponse(sequence=request.sequence, error=error_detail(refusal))
            if kind == "step":
                stepped = await self.manager.step(message.session_id, message.action, seat=message.seat,
                                                  truncated=message.truncated)
                response = pb.InteractResponse(sequence=request.sequence)
                convert.fill_step_response(response.step, stepped)
                return response
            if kind == "reset":
                result = await self.reset(message)
            elif kind == "open_session":
                result = await self.open_session(message, attempt_of(context, message.job_id) if context else "")
            else:
                result = await self.close_session(message)
        except EnvHostError as error:
            return pb.InteractResponse(sequence=request.sequence, error=error_detail(error))
        return pb.InteractResponse(sequence=request.sequence, **{kind: result})


INTERACT_ACTIONS = ("open_session", "reset", "step", "close_session")


def attempt_of(context: grpc.aio.ServicerContext, job_id: str) -> str:
    """Which attempt of `job_id` a call that passed the job-token check acts for: a digest of
    the token it presented ("" when job tokens are not checked: auth disabled, or no token)."""
    if not job_id or current_job_tokens() is None:
        return ""
    token = presented_token(context)
    return hash_job_token(token)[:16] if token else ""


def envhost_service_binding(manager: SessionManager) -> ServiceBinding:
    """The EnvHostService to host, serving `manager`'s sessions."""
    return ServiceBinding(full_name=SERVICE_FULL_NAME, servicer=EnvHostServicer(manager),
                          add_to_server=pb_grpc.add_EnvHostServiceServicer_to_server)


def _fill_step(response: pb.InteractResponse, result: StepResult) -> None:
    convert.fill_step_response(response.step, result)


def _fill_reset(response: pb.InteractResponse, outcome: ResetOutcome) -> None:
    response.reset.CopyFrom(convert.reset_response(outcome))


def _answer_soon(sequence: int, answer: Callable[[pb.InteractResponse], None],
                 fill: Callable[[pb.InteractResponse, Any], None],
                 result: Any, error: BaseException | None) -> None:
    """A call taken by `interact_soon` is done: answer it as `interact_once` would."""
    if error is None:
        response = pb.InteractResponse(sequence=sequence)
        fill(response, result)
    elif isinstance(error, EnvHostError):
        response = pb.InteractResponse(sequence=sequence, error=error_detail(error))
    else:  # a bug of ours still gets its request an answer
        log.error("interact_request_failed", sequence=sequence, exc_info=error)
        response = internal_error(sequence, error)
    answer(response)
