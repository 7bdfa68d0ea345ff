"""Several jobs' LoRA policies resident on one base model: shared weights, one batch, each row
its own adapter and version; through the registry and through gRPC Sample."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from opentinker_api.common.v1 import model_pb2, resources_pb2, sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_runtime.ml.models import build_builtin
from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_rollout.batcher import BatcherClosed
from opentinker_rollout.engine import GenerationRequest
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_rollout.policies import LoadRequest
from tests.rollout._support import MODEL_NAME
from tests.rollout._policies import (
    GREEDY,
    LORA,
    PROMPT,
    lora_reference,
    reference_greedy,
    registry,
    transfer,
)
from tests.rollout._servers import weights_requests, with_servers

SOURCE = ModelSource.builtin(MODEL_NAME, 0)
WIDE_LORA = LoraSpec(rank=8, alpha=16.0, target_modules=("q_proj", "v_proj"))


def assert_same_generation(actual, expected):
    assert actual.token_ids == expected.token_ids
    assert max(abs(a - b) for a, b in zip(actual.logprobs, expected.logprobs, strict=True)) < 1e-4


async def load_two_jobs(reg):
    """Job a (rank 4, all linear layers) and job b (rank 8, q/v only) on the same source."""
    a = await reg.load(LoadRequest(source=SOURCE, lora=LORA, lease=LeaseContext(job_id="job-a")))
    b = await reg.load(LoadRequest(source=SOURCE, lora=WIDE_LORA, lease=LeaseContext(job_id="job-b")))
    await reg.update_weights(a.policy_id, LeaseContext(job_id="job-a"),
                             *transfer(lora_state_dict(lora_reference(LORA, seed=1)), 1))
    await reg.update_weights(b.policy_id, LeaseContext(job_id="job-b"),
                             *transfer(lora_state_dict(lora_reference(WIDE_LORA, seed=2)), 3))
    return reg.get(a.policy_id), reg.get(b.policy_id)


async def greedy_together(*policies):
    request = GenerationRequest(prompt_ids=PROMPT, sampling=GREEDY)
    return await asyncio.gather(*(p.generator.generate(request) for p in policies))


def test_lora_policies_of_one_source_share_a_base_and_batch_with_their_own_adapters(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        a, b = await load_two_jobs(reg)
        shared = (a.model is b.model, a.batcher is b.batcher, reg.base_count)
        answer_a, answer_b = await greedy_together(a, b)
        await reg.load(LoadRequest(source=SOURCE, lease=LeaseContext(job_id="job-c")))
        bases_with_full = reg.base_count
        reported = [(m.device_id, m.model_key, m.job_ids) for m in reg.resident_models()]
        await reg.close()
        return shared, answer_a, answer_b, bases_with_full, a.batcher.stats, reported

    shared, answer_a, answer_b, bases_with_full, stats, reported = asyncio.run(scenario())
    assert shared == (True, True, 1)
    # what the heartbeats report: the shared base and both jobs on it (job-c's full model is its own)
    assert reported == [("cpu:0", SOURCE.model_key, ("job-a", "job-b"))]
    assert bases_with_full == 2                 # a full-weights policy gets a model of its own
    assert stats.max_rows_in_call == 2          # both jobs' rows were in one engine call
    assert_same_generation(answer_a.generations[0], reference_greedy(lora_reference(LORA, seed=1)))
    assert_same_generation(answer_b.generations[0], reference_greedy(lora_reference(WIDE_LORA, seed=2)))
    assert answer_a.generations[0].token_ids != answer_b.generations[0].token_ids
    assert (answer_a.policy_version, answer_b.policy_version) == (1, 3)


def test_unloading_one_job_deletes_its_adapter_and_leaves_the_other_serving(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        a, b = await load_two_jobs(reg)
        await reg.unload(a.policy_id, LeaseContext(job_id="job-a"))
        adapters_left = set(b.model.peft_config)
        with pytest.raises(BatcherClosed):
            await a.generator.generate(GenerationRequest(prompt_ids=PROMPT, sampling=GREEDY))
        (answer_b,) = await greedy_together(b)
        bases_before = reg.base_count
        await reg.unload(b.policy_id, LeaseContext(job_id="job-b"))
        return adapters_left, answer_b, bases_before, reg.base_count, b.batcher

    adapters_left, answer_b, bases_before, bases_after, batcher = asyncio.run(scenario())
    assert len(adapters_left) == 1 and bases_before == 1 and bases_after == 0
    assert_same_generation(answer_b.generations[0], reference_greedy(lora_reference(WIDE_LORA, seed=2)))
    with pytest.raises(BatcherClosed):            # the last policy took the base with it
        asyncio.run(batcher.generate(GenerationRequest(prompt_ids=PROMPT, sampling=GREEDY)))


def test_a_new_adapter_starts_as_the_base_model_beside_a_trained_one(tmp_path):
    async def scenario():
        reg = registry(tmp_path)
        a, _ = await load_two_jobs(reg)
        fresh = reg.get((await reg.load(LoadRequest(source=SOURCE, lora=LORA,
                                                    lease=LeaseContext(job_id="job-d")))).policy_id)
        answers = await greedy_together(a, fresh)
        await reg.close()
        return answers, fresh.version

    (answer_a, answer_fresh), fresh_version = asyncio.run(scenario())
    assert fresh_version == 0 and answer_fresh.policy_version == 0
    assert_same_generation(answer_fresh.generations[0], reference_greedy(build_builtin(MODEL_NAME, 0).eval()))
    assert_same_generation(answer_a.generations[0], reference_greedy(lora_reference(LORA, seed=1)))


def job_lease(job_id):
    return resources_pb2.LeaseContext(job_id=job_id, lease_id=f"lease-{job_id}", fencing_token=3)


def test_two_jobs_sample_their_own_policies_from_one_rollout_process(tmp_path):
    builtin = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=MODEL_NAME, seed=0))
    greedy = sampling_pb2.SamplingParams(max_new_tokens=GREEDY.max_new_tokens, temperature=0.0)
    prompt = pb.Prompt(tokens={"tokens": list(PROMPT)})
    adapters = {"job-a": lora_reference(LORA, seed=1), "job-b": lora_reference(LORA, seed=2)}

    async def scenario(stub, game):
        policies = {}
        for job_id, model in adapters.items():
            policies[job_id] = (await stub.LoadModel(pb.LoadModelRequest(
                request_id=f"load-{job_id}", lease=job_lease(job_id), model=builtin,
                adaptation=model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0))))).policy
            await stub.UpdateWeights(weights_requests(policies[job_id].policy_id, lora_state_dict(model), 1,
                                                      lease=job_lease(job_id)))
        answers = await asyncio.gather(*(
            stub.Sample(pb.SampleRequest(policy_id=policies[job].policy_id, prompts=[prompt] * 3,
                                         sampling=greedy)) for job in ("job-a", "job-b", "job-a")))
        with pytest.raises(grpc.aio.AioRpcError) as foreign:
            await stub.UnloadModel(pb.UnloadModelRequest(policy_id=policies["job-a"].policy_id,
                                                         lease=job_lease("job-b")))
        return answers, foreign.value

    answers, foreign = asyncio.run(with_servers(scenario, tmp_path))
    expected = {job: reference_greedy(model) for job, model in adapters.items()}
    assert expected["job-a"].token_ids != expected["job-b"].token_ids
    for job, answer in zip(("job-a", "job-b", "job-a"), answers, strict=True):
        for result in answer.results:
            (completion,) = result.completions
            assert tuple(completion.tokens) == expected[job].token_ids
            assert completion.policy_version == 1
            assert max(abs(a - b) for a, b in zip(completion.logprobs, expected[job].logprobs)) < 1e-4
    assert foreign.code() == grpc.StatusCode.FAILED_PRECONDITION   # a job cannot unload another's


def test_updates_of_one_job_run_while_other_jobs_adapters_come_and_go(tmp_path, monkeypatch):
    """An update reads its adapter's shapes on the engine thread, the one that adds and deletes
    adapters: read from the event loop, walking the model while another job's adapter was being
    added failed the update ("dictionary changed size during iteration"), and with it the job."""
    import threading

    from opentinker_rollout import policies

    threads = []
    real = policies.lora_state_dict

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(policies, "lora_state_dict", recording)

    async def scenario():
        reg = registry(tmp_path)
        a, _ = await load_two_jobs(reg)
        lease = LeaseContext(job_id="job-a")
        weights = lora_state_dict(lora_reference(LORA, seed=4))

        async def churn(job):
            loaded = await reg.load(LoadRequest(source=SOURCE, lora=WIDE_LORA, lease=LeaseContext(job_id=job)))
            await reg.unload(loaded.policy_id, LeaseContext(job_id=job))

        updates = [reg.update_weights(a.policy_id, lease, *transfer(weights, version)) for version in range(2, 8)]
        results = await asyncio.gather(*updates, *(churn(f"job-{n}") for n in range(4)))
        await reg.close()
        return [info.policy_version for info, _ in results[:6]]

    assert asyncio.run(scenario()) == list(range(2, 8))
    assert threads and all(name.startswith("rollout-engine") for name in threads)
