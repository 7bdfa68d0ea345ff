"""The service edge on a real in-process gRPC server: a DomainError's code, reason and field reach
the caller from unary and streaming handlers (mid-stream too, after what was already sent); a
declared RPC refuses a missing or wrong job token, an undeclared one needs none; the fencing
guard refuses a lower token."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

from opentinker_api.common.v1 import errors_pb2, resources_pb2, weights_pb2
from opentinker_api.conventions import REASON_METADATA_KEY
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.auth.api_keys import Principal
from opentinker_runtime.auth.interceptor import AuthInterceptor
from opentinker_runtime.auth.job_tokens import JOB_TOKEN_METADATA_KEY, JobTokenVerdict, JobTokenVerifier
from opentinker_runtime.edge import status
from opentinker_runtime.edge.errors import Code, DomainError
from opentinker_runtime.edge.handlers import Translation, servicer_base
from opentinker_runtime.edge.job_token import job_token
from opentinker_runtime.edge.lease import FencingGuard, LeaseContext, StaleFencingToken

SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"]
JOB, TOKEN, POLICY = "job-1", "otj_" + "a" * 43, "policy-1"
ADMIN_KEY, TENANT_KEY = "admin-key", "tenant-key"


class PolicyGone(DomainError):
    code = Code.NOT_FOUND
    reason = "SESSION_NOT_FOUND"


class StoreDown(Exception):
    """A non-domain error the test service translates."""


class EdgeRollout(servicer_base(pb_grpc.RolloutServiceServicer, SERVICE,  # type: ignore[misc]
                                translation=Translation(errors=(StoreDown,),
                                                        to_domain=lambda e: DomainError(str(e), code=Code.UNAVAILABLE)))):
    """Sample raises what its prompt count says; RunEpisodes yields two items, then fails;
    UpdateWeights reads its whole stream; LoadModel is undeclared; UnloadModel is admin-only."""

    def __init__(self) -> None:
        self.received: list[Any] = []

    def job_of_owner(self, policy_id: str) -> str:
        if policy_id != POLICY:
            raise PolicyGone(f"no policy {policy_id!r}", field="policy_id")
        return JOB

    @job_token(owner="policy_id")
    async def Sample(self, request: pb.SampleRequest, context: Any) -> pb.SampleResponse:
        if request.sampling.n == 7:
            raise DomainError("must be at most 6", field="sampling.n", code=Code.INVALID_ARGUMENT,
                              reason="INVALID_FIELD")
        if request.sampling.n == 8:
            raise StoreDown("the store is down")
        return pb.SampleResponse()

    @job_token(lease="lease", owner="policy_id")
    async def RunEpisodes(self, request: pb.RunEpisodesRequest, context: Any) -> AsyncIterator[pb.RunEpisodesResponse]:
        for index in range(2):
            yield pb.RunEpisodesResponse(error=errors_pb2.ErrorDetail(message=f"item {index}"))
        raise DomainError("the policy was unloaded mid-run", field="policy_id", code=Code.FAILED_PRECONDITION,
                          reason="STALE_FENCING_TOKEN")

    @job_token(lease="target.lease", owner="target.policy_id")
    async def UpdateWeights(self, requests: Any, context: Any) -> pb.UpdateWeightsResponse:
        self.received = [message.WhichOneof("item") async for message in requests]
        return pb.UpdateWeightsResponse(bytes_received=len(self.received))

    async def LoadModel(self, request: pb.LoadModelRequest, context: Any) -> pb.LoadModelResponse:
        return pb.LoadModelResponse()

    @job_token(lease="lease", admin_only="UnloadModel (a worker's call)")
    async def UnloadModel(self, request: pb.UnloadModelRequest, context: Any) -> pb.UnloadModelResponse:
        return pb.UnloadModelResponse()


class OneJobTokens(JobTokenVerifier):
    """JOB's current attempt holds TOKEN and fencing tokens 5 and 6; other jobs are unknown."""

    def __init__(self) -> None:
        super().__init__(client=None)  # type: ignore[arg-type] - never reads Redis

    async def verify(self, job_id: str, token: str, fencing_token: int | None = None) -> JobTokenVerdict:
        if job_id != JOB:
            return JobTokenVerdict(allowed=True)
        if token != TOKEN:
            return JobTokenVerdict(allowed=False, problem="the job token is not the current attempt's")
        if fencing_token is not None and fencing_token not in (5, 6):
            return JobTokenVerdict(allowed=False, problem=f"fencing token {fencing_token} is not current")
        return JobTokenVerdict(allowed=True)


async def verify_key(key: str) -> Principal | None:
    return {ADMIN_KEY: Principal(tenant_id="ops", admin=True, key_id="a"),
            TENANT_KEY: Principal(tenant_id="acme", key_id="t")}.get(key)


Scenario = Callable[[pb_grpc.RolloutServiceStub, EdgeRollout], Awaitable[None]]


def run(scenario: Scenario, *, auth: bool = True) -> None:
    async def serve() -> None:
        interceptors = [AuthInterceptor(verify_key, service_label="Rollout", job_tokens=OneJobTokens())] if auth else []
        server = grpc.aio.server(interceptors=interceptors)
        servicer = EdgeRollout()
        pb_grpc.add_RolloutServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await scenario(pb_grpc.RolloutServiceStub(channel), servicer)
        finally:
            await server.stop(0)
    asyncio.run(serve())


def credentials(key: str = ADMIN_KEY, token: str | None = TOKEN) -> tuple[tuple[str, str], ...]:
    bearer = (("authorization", f"Bearer {key}"),)
    return bearer + (((JOB_TOKEN_METADATA_KEY, token),) if token is not None else ())


async def refusal(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def reason(error: grpc.aio.AioRpcError) -> str:
    return dict(error.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")


def test_a_domain_error_of_a_unary_handler_gives_its_code_reason_and_field() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        request = pb.SampleRequest(policy_id=POLICY)
        request.sampling.n = 7
        error = await refusal(stub.Sample(request, metadata=credentials()))
        assert (error.code(), reason(error)) == (grpc.StatusCode.INVALID_ARGUMENT, "ERROR_REASON_INVALID_FIELD")
        assert error.details() == "sampling.n: must be at most 6"
    run(scenario)


def test_a_domain_error_mid_stream_comes_after_every_item_already_sent() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        call = stub.RunEpisodes(pb.RunEpisodesRequest(policy_id=POLICY), metadata=credentials())
        received = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for item in call:
                received.append(item.error.message)
        assert received == ["item 0", "item 1"]
        error = caught.value
        assert (error.code(), reason(error)) == (grpc.StatusCode.FAILED_PRECONDITION, "ERROR_REASON_STALE_FENCING_TOKEN")
        assert error.details() == "policy_id: the policy was unloaded mid-run"
    run(scenario)


def test_an_error_without_a_reason_sends_none_and_translated_errors_map_too() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        request = pb.SampleRequest(policy_id=POLICY)
        request.sampling.n = 8
        error = await refusal(stub.Sample(request, metadata=credentials()))
        assert (error.code(), reason(error), error.details()) == (grpc.StatusCode.UNAVAILABLE, "", "the store is down")
    run(scenario)


def test_a_declared_rpc_refuses_a_missing_or_wrong_job_token() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        for token in (None, "otj_" + "b" * 43):
            error = await refusal(stub.Sample(pb.SampleRequest(policy_id=POLICY), metadata=credentials(token=token)))
            assert (error.code(), reason(error)) == (grpc.StatusCode.PERMISSION_DENIED, "ERROR_REASON_JOB_TOKEN_INVALID")
            assert "otj_" not in error.details()  # a refusal never echoes a token
        stale = pb.RunEpisodesRequest(policy_id=POLICY, lease=resources_pb2.LeaseContext(job_id=JOB, fencing_token=4))
        error = await refusal(_drain(stub.RunEpisodes(stale, metadata=credentials())))
        assert reason(error) == "ERROR_REASON_JOB_TOKEN_INVALID" and "fencing token 4" in error.details()
        assert await stub.Sample(pb.SampleRequest(policy_id=POLICY), metadata=credentials()) == pb.SampleResponse()
    run(scenario)


def test_the_owner_of_an_id_is_looked_up_and_its_domain_error_answers() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        error = await refusal(stub.Sample(pb.SampleRequest(policy_id="nope"), metadata=credentials()))
        assert (error.code(), reason(error)) == (grpc.StatusCode.NOT_FOUND, "ERROR_REASON_SESSION_NOT_FOUND")
        assert error.details() == "policy_id: no policy 'nope'"
    run(scenario)


def test_an_undeclared_rpc_needs_no_job_token() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        request = pb.LoadModelRequest(lease=resources_pb2.LeaseContext(job_id=JOB, fencing_token=1))
        assert await stub.LoadModel(request, metadata=credentials(token=None)) == pb.LoadModelResponse()
    run(scenario)


def test_an_admin_only_rpc_refuses_a_tenant_key_before_looking_at_the_job() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        unknown_job = pb.UnloadModelRequest(lease=resources_pb2.LeaseContext(job_id="job-2"))
        for request in (pb.UnloadModelRequest(lease=resources_pb2.LeaseContext(job_id=JOB)), unknown_job):
            error = await refusal(stub.UnloadModel(request, metadata=credentials(TENANT_KEY, token=None)))
            assert (error.code(), reason(error)) == (grpc.StatusCode.PERMISSION_DENIED, "ERROR_REASON_UNAUTHENTICATED")
            assert error.details() == ("UnloadModel (a worker's call) needs an admin key; this key belongs to "
                                       "tenant acme without admin rights")
        assert await stub.UnloadModel(unknown_job, metadata=credentials(token=None)) == pb.UnloadModelResponse()
    run(scenario)


def test_a_client_stream_is_checked_on_its_first_message_and_then_read_whole() -> None:
    def stream(lease_token: int) -> list[pb.UpdateWeightsRequest]:
        target = pb.UpdateWeightsTarget(policy_id=POLICY, lease=resources_pb2.LeaseContext(
            job_id=JOB, fencing_token=lease_token))
        return [pb.UpdateWeightsRequest(target=target), pb.UpdateWeightsRequest(header=weights_pb2.WeightsHeader()),
                pb.UpdateWeightsRequest(chunk=weights_pb2.WeightsChunk())]

    async def scenario(stub: pb_grpc.RolloutServiceStub, servicer: EdgeRollout) -> None:
        error = await refusal(stub.UpdateWeights(_aiter(stream(3)), metadata=credentials()))
        assert reason(error) == "ERROR_REASON_JOB_TOKEN_INVALID" and "fencing token 3" in error.details()
        answer = await stub.UpdateWeights(_aiter(stream(6)), metadata=credentials())
        assert answer.bytes_received == 3 and servicer.received == ["target", "header", "chunk"]
    run(scenario)


def test_with_auth_disabled_no_job_token_is_checked() -> None:
    async def scenario(stub: pb_grpc.RolloutServiceStub, _: EdgeRollout) -> None:
        assert await stub.Sample(pb.SampleRequest(policy_id=POLICY)) == pb.SampleResponse()
    run(scenario, auth=False)


def test_the_fencing_guard_refuses_a_lower_token_and_follows_the_assigned_attempt() -> None:
    guard = FencingGuard(worker="trainer")
    guard.check(LeaseContext(job_id=JOB, fencing_token=5))
    with pytest.raises(StaleFencingToken) as stale:
        guard.check(LeaseContext(job_id=JOB, fencing_token=4))
    assert stale.value.message == ("lease.fencing_token: 4 is stale for job 'job-1'; this trainer has seen 5 "
                                   "(a newer attempt owns the job)")
    assert (stale.value.code, stale.value.reason) == (Code.FAILED_PRECONDITION, "STALE_FENCING_TOKEN")
    guard.check(LeaseContext(fencing_token=1))  # no job: not fenced
    guard.attempt_assigned(JOB, 7)
    with pytest.raises(StaleFencingToken):
        guard.check(LeaseContext(job_id=JOB, fencing_token=6))
    assert guard.holds(JOB, 7) and not guard.holds(JOB, 6) and guard.highest(JOB) == 7
    guard.job_stopped(JOB)
    assert not guard.holds(JOB, 7)
    with pytest.raises(StaleFencingToken):  # a stopped job's floor stays
        guard.check(LeaseContext(job_id=JOB, fencing_token=6))


def test_the_in_stream_form_of_an_error_carries_its_code_reason_and_traceback() -> None:
    error = DomainError("boom", code=Code.INTERNAL, reason="ENVIRONMENT_FAILED")
    error.traceback = "Traceback: boom"
    detail = status.error_detail(error)
    assert (detail.code, detail.message, detail.reason, detail.traceback) == (
        grpc.StatusCode.INTERNAL.value[0], "boom", errors_pb2.ERROR_REASON_ENVIRONMENT_FAILED, "Traceback: boom")
    assert status.error_detail(DomainError("x")).reason == errors_pb2.ERROR_REASON_UNSPECIFIED


ERROR_MODULES = ("opentinker_runtime.edge.errors", "opentinker_runtime.edge.lease", "opentinker_scheduler.errors",
                 "opentinker_trainer.errors", "opentinker_rollout.errors", "opentinker_envhost.errors",
                 "opentinker_coordinator.protocol.protocol_errors", "opentinker_coordinator.runs")


def test_every_domain_error_declares_a_reason_the_wire_knows() -> None:
    for name in ERROR_MODULES:
        importlib.import_module(name)
    classes = _subclasses(DomainError)
    assert len(classes) > 40
    for cls in classes:
        if cls.reason:
            errors_pb2.ErrorReason.Value(f"ERROR_REASON_{cls.reason}")
        assert isinstance(cls.code, Code), cls


def _subclasses(cls: type) -> list[type]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


async def _aiter(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item
