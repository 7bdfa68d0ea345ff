"""Policies on the builtin tiny model: load (LoRA or full), UpdateWeights round trips that
change what the policy samples, version conflicts, corrupt transfers, fencing, idempotent load."""

from __future__ import annotations

import asyncio

import pytest
import torch

from opentinker_runtime.ml.models import build_builtin
from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_rollout.batcher import BatcherClosed
from opentinker_rollout.engine import GenerationRequest
from opentinker_rollout.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    WeightsCorrupt,
    WeightsVersionConflict,
)
from opentinker_runtime.edge.lease import LeaseContext, StaleFencingToken
from opentinker_rollout.policies import LoadRequest, PolicyRegistry, WeightsFormat
from tests.rollout._policies import GREEDY, LORA, PROMPT, lora_reference, reference_greedy, registry, transfer
from tests.rollout._support import MODEL_NAME

NO_LEASE = LeaseContext()


async def greedy(policy, prompt=PROMPT):
    answer = await policy.generator.generate(GenerationRequest(prompt_ids=prompt, sampling=GREEDY))
    return answer.generations[0], answer.policy_version


def load_lora(reg: PolicyRegistry, lease: LeaseContext = NO_LEASE, request_id: str = "") -> str:
    request = LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0), lora=LORA, lease=lease,
                          request_id=request_id)
    return asyncio.run(reg.load(request)).policy_id


def test_a_lora_update_changes_outputs_to_those_of_the_sender(tmp_path):
    reference = lora_reference()

    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0), lora=LORA))
        policy = reg.get(info.policy_id)
        before, version_before = await greedy(policy)
        header, chunks = transfer(lora_state_dict(reference), version=1)
        updated, received = await reg.update_weights(info.policy_id, LeaseContext(), header, chunks)
        after, version_after = await greedy(policy)
        await reg.close()
        return info, before, version_before, updated, received, header, after, version_after

    info, before, v0, updated, received, header, after, v1 = asyncio.run(scenario())
    assert info.policy_version == 0 and v0 == 0
    assert info.model_info.stop_token_ids == (259,) and info.model_info.vocab_size == 260
    assert before == reference_greedy(build_builtin(MODEL_NAME, 0).eval())  # zero-init adapter
    assert updated.policy_version == 1 and v1 == 1 and received == header.total_bytes
    expected = reference_greedy(reference)
    assert after.token_ids == expected.token_ids != before.token_ids
    assert max(abs(a - b) for a, b in zip(after.logprobs, expected.logprobs, strict=True)) < 1e-5


def test_a_version_not_newer_than_the_current_one_is_refused(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0), lora=LORA))
        await reg.update_weights(info.policy_id, LeaseContext(), *transfer(lora_state_dict(lora_reference()), 2))
        errors = []
        for version in (2, 1):
            try:
                await reg.update_weights(info.policy_id, LeaseContext(),
                                         *transfer(lora_state_dict(lora_reference(seed=9)), version))
            except WeightsVersionConflict as error:
                errors.append(error)
        current = reg.get(info.policy_id).version
        await reg.close()
        return errors, current

    errors, current = asyncio.run(scenario())
    assert len(errors) == 2 and current == 2
    assert errors[0].reason == "WEIGHTS_VERSION_CONFLICT" and "header.policy_version" in str(errors[0])


def test_corrupt_or_mismatched_transfers_change_nothing(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0), lora=LORA))
        policy = reg.get(info.policy_id)
        before, _ = await greedy(policy)
        problems = []
        attempts = [transfer(lora_state_dict(lora_reference()), 1, sha256="0" * 64),
                    transfer(lora_state_dict(lora_reference(LoraSpec(rank=8, alpha=8.0))), 1),
                    transfer({"bogus.weight": torch.zeros(2)}, 1)]
        for header, chunks in attempts:
            with pytest.raises(WeightsCorrupt) as caught:
                await reg.update_weights(info.policy_id, LeaseContext(), header, chunks)
            problems.append(str(caught.value))
        with pytest.raises(FailedPrecondition, match="header.format"):
            full = transfer(build_builtin(MODEL_NAME, 1).state_dict(), 1, WeightsFormat.FULL)
            await reg.update_weights(info.policy_id, LeaseContext(), *full)
        after, version = await greedy(policy)
        await reg.close()
        return problems, before, after, version

    problems, before, after, version = asyncio.run(scenario())
    assert "sha256" in problems[0] and "wrong shapes" in problems[1] and "unknown tensors" in problems[2]
    assert after == before and version == 0


def test_full_weights_replace_a_full_policy(tmp_path):
    sender = build_builtin(MODEL_NAME, 1).eval()

    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0)))
        header, chunks = transfer(sender.state_dict(), 1, WeightsFormat.FULL)
        await reg.update_weights(info.policy_id, LeaseContext(), header, chunks)
        after, version = await greedy(reg.get(info.policy_id))
        with pytest.raises(FailedPrecondition, match="LORA_ADAPTER weights need"):
            await reg.update_weights(info.policy_id, LeaseContext(), *transfer(lora_state_dict(lora_reference()), 2))
        await reg.close()
        return after, version

    after, version = asyncio.run(scenario())
    assert version == 1 and after == reference_greedy(sender)


def test_a_lower_fencing_token_is_refused_for_every_call_of_the_job(tmp_path):
    reg = registry(tmp_path)
    policy_id = load_lora(reg, LeaseContext(job_id="job-1", fencing_token=5))
    with pytest.raises(StaleFencingToken):
        asyncio.run(reg.update_weights(policy_id, LeaseContext(job_id="job-1", fencing_token=4),
                                       *transfer(lora_state_dict(lora_reference()), 1)))
    asyncio.run(reg.update_weights(policy_id, LeaseContext(job_id="job-1", fencing_token=6),
                                   *transfer(lora_state_dict(lora_reference()), 1)))
    with pytest.raises(StaleFencingToken, match="fencing_token: 5 is stale"):
        asyncio.run(reg.unload(policy_id, LeaseContext(job_id="job-1", fencing_token=5)))
    with pytest.raises(FailedPrecondition, match="belongs to job 'job-1'"):
        asyncio.run(reg.unload(policy_id, LeaseContext(job_id="job-2", fencing_token=1)))
    assert reg.get(policy_id).version == 1


def test_load_is_idempotent_per_request_id(tmp_path):
    reg = registry(tmp_path)
    first = load_lora(reg, request_id="r1")
    assert load_lora(reg, request_id="r1") == first
    assert load_lora(reg, request_id="r2") != first
    with pytest.raises(InvalidArgument) as caught:
        asyncio.run(reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 1), request_id="r1")))
    assert caught.value.reason == "REQUEST_ID_REUSED"


def test_unknown_models_and_policies_name_the_field(tmp_path):
    reg = registry(tmp_path)
    with pytest.raises(InvalidArgument, match="model: name: unknown builtin model 'nope'"):
        asyncio.run(reg.load(LoadRequest(source=ModelSource.builtin("nope", 0))))
    with pytest.raises(InvalidArgument, match="model"):
        asyncio.run(reg.load(LoadRequest(source=ModelSource.checkpoint("missing-ckpt"))))
    with pytest.raises(NotFound, match="policy_id"):
        reg.get("no-such-policy")


def test_unload_fails_waiting_generations_and_forgets_the_policy(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        info = await reg.load(LoadRequest(source=ModelSource.builtin(MODEL_NAME, 0)))
        policy = reg.get(info.policy_id)
        pending = asyncio.create_task(greedy(policy))
        await reg.unload(info.policy_id, LeaseContext())
        with pytest.raises(NotFound):
            reg.get(info.policy_id)
        return await asyncio.gather(pending, return_exceptions=True)

    (result,) = asyncio.run(scenario())
    assert isinstance(result, BatcherClosed)
