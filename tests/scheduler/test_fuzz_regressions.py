"""Regressions found by fuzzing the live Scheduler (tests/chaos/test_fuzz_rpcs.py): bad input is
INVALID_ARGUMENT naming the field, never UNKNOWN."""

from __future__ import annotations

import asyncio
import math

import grpc

from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from tests.scheduler._harness import reason_of, rl_spec, rpc_error, scheduler_server


def test_list_api_keys_of_a_malformed_tenant_id_is_invalid_not_a_redis_key_error(redis_url: str) -> None:
    async def scenario() -> list[grpc.aio.AioRpcError]:
        async with scheduler_server(redis_url) as h:
            # was UNKNOWN: "ValueError: Redis key part tenant_id=... must be non-empty without whitespace"
            return [await rpc_error(h.stub.ListApiKeys(pb.ListApiKeysRequest(tenant_id=bad)))
                    for bad in ("two words", "\x95\U000bad99\xa0", "Upper")]

    for error in asyncio.run(scenario()):
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details().startswith("tenant_id: must be 1-63 lowercase letters")
        assert reason_of(error) == "ERROR_REASON_INVALID_FIELD"


def test_a_spec_whose_config_holds_nan_is_invalid_at_submit_not_a_failed_run(redis_url: str) -> None:
    """Structs are opaque to the Scheduler, but NaN and Infinity have no JSON form: the Coordinator
    and the games could never read the config (its json_format raised ValueError -> UNKNOWN)."""
    spec = rl_spec()
    spec.environment.config.update({"seed": 1, "levels": [{"penalty": math.nan}]})

    async def scenario() -> grpc.aio.AioRpcError:
        async with scheduler_server(redis_url) as h:
            return await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=True)))

    error = asyncio.run(scenario())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith("spec.environment.config['levels'][0]['penalty']: must be a finite number")


def test_a_lora_rank_the_workers_refuse_is_refused_at_submit(redis_url: str) -> None:
    spec = rl_spec()
    spec.policy.adaptation.lora.rank = 1 << 20

    async def scenario() -> grpc.aio.AioRpcError:
        async with scheduler_server(redis_url) as h:
            return await rpc_error(h.stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=True)))

    error = asyncio.run(scenario())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "spec.policy.adaptation.lora.rank: must be at most 1024, got 1.04858e+06"
