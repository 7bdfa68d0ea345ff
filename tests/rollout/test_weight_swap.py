"""Weight sync without a stall: UpdateWeights lands between two decode steps while generations
keep running. A generation in flight keeps its rows: its first tokens come from the old weights,
the rest from the new ones (each with the logprob of the weights that sampled it), and it reports
the version it was admitted under; a request admitted after the swap reports the new version; a
request that arrives during the swap waits a step and is answered; the other LoRA adapters on
the base keep their weights. Through the batcher, the registry and real gRPC."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Sequence
from functools import cache

import grpc
import torch
from transformers import DynamicCache

from opentinker_api.common.v1 import sampling_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as pb
from opentinker_api.rollout.v1 import rollout_service_pb2_grpc as pb_grpc
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_runtime.ml.models import build_builtin
from opentinker_runtime.ml.sources import ModelSource
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_rollout.batcher import GenerationBatcher
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_runtime.edge.lease import LeaseContext
from opentinker_rollout.main import build_plan
from opentinker_rollout.policies import LoadRequest, WeightsFormat
from opentinker_rollout.settings import RolloutSettings
from tests.rollout._generation import prompts, request
from tests.rollout._policies import GREEDY, LORA, PROMPT, lora_reference, registry, transfer
from tests.rollout._servers import load, weights_requests
from tests.rollout._support import MODEL_NAME, tiny_engine

SOURCE = ModelSource.builtin(MODEL_NAME, 0)
LONG_TOKENS = 80
LONG = SamplingConfig(max_new_tokens=LONG_TOKENS, temperature=0.0)
STEPS_BEFORE_UPDATE = 5


async def steps_done(batcher: GenerationBatcher, steps: int) -> None:
    """Wait until the batcher has run `steps` engine steps in all."""
    while batcher.stats.engine_calls < steps:
        await asyncio.sleep(0.001)


async def then_record(order: list[str], name: str, call: Awaitable):
    answer = await call
    order.append(name)
    return answer


def greedy_with_swap(old: torch.nn.Module, new: torch.nn.Module, swap_at: int,
                     total: int = LONG_TOKENS, prompt: Sequence[int] = PROMPT):
    """Greedy decoding of one sequence by plain forwards whose weights change after `swap_at`
    tokens: tokens 0..swap_at-1 are sampled by `old`, the later ones by `new` reading the KV cache
    `old` wrote (what a swap between two decode steps gives); each token with the log_softmax of
    the model that sampled it. (tokens, logprobs)."""
    cache, inputs, tokens, logprobs = DynamicCache(), list(prompt), [], []
    with torch.no_grad():
        for i in range(total):
            model = old if i < swap_at else new
            logits_V = model(input_ids=torch.tensor([inputs]), past_key_values=cache,
                             use_cache=True).logits[0, -1].float()
            token = int(logits_V.argmax())
            tokens.append(token)
            logprobs.append(float(torch.log_softmax(logits_V, dim=-1)[token]))
            inputs = [token]
    return tokens, logprobs


def assert_matches(generation, tokens: Sequence[int], logprobs: Sequence[float]) -> None:
    """A Generation (or a gRPC Completion) has exactly these tokens, with these logprobs."""
    got = generation.token_ids if hasattr(generation, "token_ids") else generation.tokens
    assert list(got) == list(tokens)
    assert max(abs(a - b) for a, b in zip(generation.logprobs, logprobs, strict=True)) < 1e-4


@cache
def base_model() -> torch.nn.Module:
    """The builtin model as loaded (a zero-initialised adapter computes the same)."""
    return build_builtin(MODEL_NAME, 0).eval()


@cache
def base_greedy() -> tuple[list[int], list[float]]:
    """What the old weights alone decode from PROMPT."""
    return greedy_with_swap(base_model(), base_model(), LONG_TOKENS)


def test_between_steps_keeps_the_running_rows_and_queues_new_requests():
    engine = tiny_engine(eos_token_ids=())

    async def scenario():
        batcher = GenerationBatcher(engine, max_batch_size=8)
        running = asyncio.create_task(batcher.generate(request(prompts()[0], max_new_tokens=60)))
        await steps_done(batcher, 3)
        steps_when_asked = batcher.stats.engine_calls   # counted from the start of a step
        async with batcher.between_steps():
            rows_inside, steps_inside = engine.running_rows, batcher.stats.engine_calls
            arriving = asyncio.create_task(batcher.generate(request(prompts()[1], max_new_tokens=5)))
            await asyncio.sleep(0.05)
            held = (batcher.stats.engine_calls == steps_inside, running.done(), arriving.done())
            batcher.versions[""] = 7
        old, new = await running, await arriving
        await batcher.close()
        return rows_inside, steps_when_asked, steps_inside, held, old, new

    rows_inside, steps_when_asked, steps_inside, held, old, new = asyncio.run(scenario())
    assert steps_inside == steps_when_asked             # it waited for the step in progress only
    assert rows_inside == 1 and steps_inside < 60       # the row stayed admitted, mid-decoding
    assert held == (True, False, False)                 # no step ran while held; nothing answered
    assert (old.policy_version, len(old.generations[0].token_ids)) == (0, 60)
    assert (new.policy_version, len(new.generations[0].token_ids)) == (7, 5)


def test_a_lora_update_lands_between_decode_steps_of_a_running_generation(tmp_path):
    new_weights = lora_reference(seed=1)

    async def scenario():
        reg = registry(tmp_path)
        policy = reg.get((await reg.load(LoadRequest(source=SOURCE, lora=LORA))).policy_id)
        order: list[str] = []
        long_task = asyncio.create_task(then_record(
            order, "generation", policy.generator.generate(GenerationRequest(prompt_ids=PROMPT, sampling=LONG))))
        await steps_done(policy.batcher, STEPS_BEFORE_UPDATE)
        updated, _ = await reg.update_weights(policy.policy_id, LeaseContext(),
                                              *transfer(lora_state_dict(new_weights), 1))
        swap_at = policy.batcher.stats.engine_calls  # one token per step since the long one's prefill
        order.append("update")
        later = await policy.generator.generate(GenerationRequest(prompt_ids=PROMPT, sampling=GREEDY))
        in_flight = await long_task
        await reg.close()
        return order, updated, swap_at, in_flight, later

    order, updated, swap_at, in_flight, later = asyncio.run(scenario())
    assert order == ["update", "generation"]            # the update did not wait for the drain
    assert updated.policy_version == 1 and STEPS_BEFORE_UPDATE <= swap_at < LONG_TOKENS
    assert in_flight.policy_version == 0                # the version that sampled its first token
    (generation,) = in_flight.generations
    assert_matches(generation, *greedy_with_swap(base_model(), new_weights, swap_at))
    assert list(generation.token_ids[swap_at:]) != base_greedy()[0][swap_at:]  # the new weights took over
    assert later.policy_version == 1
    assert_matches(later.generations[0], *greedy_with_swap(new_weights, new_weights, 0, GREEDY.max_new_tokens))


def test_after_a_full_weights_swap_every_token_is_the_new_weights_certain_one(tmp_path):
    """New weights with a zero final norm: every logit is 0, so greedy takes token 0 with logprob
    -log(vocab) whatever the context; the tokens before the swap are the old weights' own."""
    blank = base_model().state_dict()
    blank["model.norm.weight"].zero_()

    async def scenario():
        reg = registry(tmp_path)
        policy = reg.get((await reg.load(LoadRequest(source=SOURCE))).policy_id)
        long_task = asyncio.create_task(
            policy.generator.generate(GenerationRequest(prompt_ids=PROMPT, sampling=LONG)))
        await steps_done(policy.batcher, STEPS_BEFORE_UPDATE)
        await reg.update_weights(policy.policy_id, LeaseContext(), *transfer(blank, 1, WeightsFormat.FULL))
        swap_at, done_at_swap = policy.batcher.stats.engine_calls, long_task.done()
        in_flight = await long_task
        vocab = policy.model_info.vocab_size
        await reg.close()
        return swap_at, done_at_swap, in_flight, vocab

    swap_at, done_at_swap, in_flight, vocab = asyncio.run(scenario())
    assert not done_at_swap and STEPS_BEFORE_UPDATE <= swap_at < LONG_TOKENS
    (generation,) = in_flight.generations
    old_tokens, old_logprobs = (values[:swap_at] for values in base_greedy())
    assert_matches(generation, old_tokens + [0] * (LONG_TOKENS - swap_at),
                   old_logprobs + [-math.log(vocab)] * (LONG_TOKENS - swap_at))
    assert 0 not in old_tokens and in_flight.policy_version == 0


def test_updating_one_adapter_leaves_the_other_adapters_generation_untouched(tmp_path):
    weights_a, weights_b = lora_reference(seed=1), lora_reference(seed=2)

    async def scenario():
        reg = registry(tmp_path)
        a, b = [reg.get((await reg.load(LoadRequest(source=SOURCE, lora=LORA, lease=LeaseContext(job_id=job))
                                        )).policy_id) for job in ("job-a", "job-b")]
        await reg.update_weights(b.policy_id, LeaseContext(job_id="job-b"), *transfer(lora_state_dict(weights_b), 4))
        long_request = GenerationRequest(prompt_ids=PROMPT, sampling=LONG)
        running = [asyncio.create_task(p.generator.generate(long_request)) for p in (a, b)]
        await steps_done(a.batcher, STEPS_BEFORE_UPDATE)
        await reg.update_weights(a.policy_id, LeaseContext(job_id="job-a"), *transfer(lora_state_dict(weights_a), 1))
        at_swap = (a.version, b.version, [task.done() for task in running])
        answers = await asyncio.gather(*running)
        await reg.close()
        return at_swap, answers

    (version_a, version_b, done), (answer_a, answer_b) = asyncio.run(scenario())
    assert (version_a, version_b, done) == (1, 4, [False, False])
    assert (answer_a.policy_version, answer_b.policy_version) == (0, 4)
    assert_matches(answer_b.generations[0], *greedy_with_swap(weights_b, weights_b, LONG_TOKENS))
    assert list(answer_a.generations[0].token_ids) != base_greedy()[0]   # a's own update reached it


async def with_rollout(scenario, tmp_path):
    """A real RolloutService on a free port (no Scheduler: port 1 refuses): scenario(stub, registry)."""
    settings = RolloutSettings(auth="disabled", port=0, checkpoint_dir=tmp_path, max_batch_size=16,
                               scheduler_address="127.0.0.1:1")
    plan = await build_plan(settings)
    server = await start_server(settings, plan)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            return await scenario(pb_grpc.RolloutServiceStub(channel), plan.services[0].servicer.rollout.registry)
    finally:
        await stop_server(server, grace_seconds=1)
        for hook in plan.close_hooks:
            await hook()


def test_update_weights_over_grpc_answers_while_a_long_sample_decodes(tmp_path):
    prompt = pb.Prompt(tokens={"tokens": list(PROMPT)})
    long_sampling = sampling_pb2.SamplingParams(max_new_tokens=LONG_TOKENS, temperature=0.0)
    short_sampling = sampling_pb2.SamplingParams(max_new_tokens=GREEDY.max_new_tokens, temperature=0.0)
    new_weights = lora_reference(seed=1)

    async def scenario(stub, reg):
        policy = await load(stub)

        async def sample(sampling):
            return await stub.Sample(pb.SampleRequest(policy_id=policy.policy_id, prompts=[prompt],
                                                      sampling=sampling))

        order: list[str] = []
        long_task = asyncio.create_task(then_record(order, "long sample", sample(long_sampling)))
        await steps_done(reg.get(policy.policy_id).batcher, STEPS_BEFORE_UPDATE)
        during: list[asyncio.Task] = []

        async def stream():   # a Sample is sent while the weights are on the wire
            for i, message in enumerate(weights_requests(policy.policy_id, lora_state_dict(new_weights), 1)):
                if i == 3:
                    during.append(asyncio.create_task(sample(short_sampling)))
                yield message

        updated = await stub.UpdateWeights(stream())
        order.append("update")
        after = await sample(short_sampling)
        return order, updated, await long_task, await during[0], after

    order, updated, long_answer, during, after = asyncio.run(with_rollout(scenario, tmp_path))
    assert order == ["update", "long sample"]
    assert updated.policy.policy_version == 1
    (long_completion,) = long_answer.results[0].completions
    assert long_completion.policy_version == 0 and len(long_completion.tokens) == LONG_TOKENS
    (sent_during,) = during.results[0].completions     # answered, by either version
    assert len(sent_during.tokens) == GREEDY.max_new_tokens and sent_during.policy_version in (0, 1)
    (completion,) = after.results[0].completions
    assert completion.policy_version == 1
    assert_matches(completion, *greedy_with_swap(new_weights, new_weights, 0, GREEDY.max_new_tokens))
