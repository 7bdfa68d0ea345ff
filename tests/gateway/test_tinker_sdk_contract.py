"""The real `tinker` SDK (pinned in requirements/dev.txt) against a live stack through the gateway.

Every public method of ServiceClient, TrainingClient and SamplingClient the gateway serves runs
here, sync and awaited, with the errors a user meets: a bad loss name, an unknown model and
another tenant's checkpoint each raise their SDK error class.
"""

from __future__ import annotations

import asyncio
import math
import os
import time

import numpy as np
import pytest

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

BASE = "tiny-llama"
TEXT = "The answer is 13."


def sft_datum(tokenizer, text: str = TEXT) -> types.Datum:
    ids = tokenizer.encode(text)
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)})


def rl_datum(tokenizer, advantage: float, logprobs: list[float] | None = None) -> types.Datum:
    ids = tokenizer.encode(TEXT)
    n = len(ids) - 1
    return types.Datum(model_input=types.ModelInput.from_ints(ids[:-1]),
                       loss_fn_inputs={"target_tokens": ids[1:], "logprobs": logprobs or [-5.0] * n,
                                       "advantages": [advantage] * n})


@pytest.fixture(scope="module")
def training(service_client):
    client = service_client.create_lora_training_client(base_model=BASE, rank=8, seed=3).result()
    return client


def test_capabilities_list_the_catalog(service_client):
    names = {m.model_name for m in service_client.get_server_capabilities().supported_models}
    assert {"tiny-llama", "tiny-qwen2", "small-llama"} <= names


def test_a_training_client_knows_its_model_and_its_tokenizer_loads_offline(training):
    info = training.get_info()
    assert info.model_data.model_name == BASE and info.lora_rank == 8 and info.is_lora
    tokenizer = training.get_tokenizer()
    assert tokenizer.decode(tokenizer.encode(TEXT)) == TEXT


def test_cross_entropy_falls_and_outputs_align_with_targets(training):
    tokenizer = training.get_tokenizer()
    datum = sft_datum(tokenizer)
    losses = []
    for _ in range(4):
        backward = training.forward_backward([datum], "cross_entropy")
        step = training.optim_step(types.AdamParams(learning_rate=2e-2))
        result = backward.result()
        step.result()
        losses.append(result.metrics["loss:sum"])
        logprobs = result.loss_fn_outputs[0]["logprobs"].to_numpy()
        assert logprobs.shape == (len(datum.model_input.to_ints()),)
        assert math.isclose(-float(logprobs.sum()), result.metrics["loss:sum"], rel_tol=1e-4)
    assert losses[-1] < losses[0] * 0.9, losses


def test_forward_computes_without_changing_the_weights(training):
    datum = sft_datum(training.get_tokenizer(), "a different sentence")
    first = training.forward([datum], "cross_entropy").result()
    second = training.forward([datum], "cross_entropy").result()
    assert first.metrics["loss:sum"] == pytest.approx(second.metrics["loss:sum"], abs=1e-6)


def test_gradients_accumulate_across_calls_until_the_optimizer_step(service_client):
    """Two forward_backward calls of one datum each, then one step, equal one call of both."""
    def trained(split: bool) -> float:
        client = service_client.create_lora_training_client(base_model=BASE, rank=4, seed=11).result()
        tokenizer = client.get_tokenizer()
        data = [sft_datum(tokenizer, "first one"), sft_datum(tokenizer, "second one")]
        if split:
            client.forward_backward(data[:1], "cross_entropy").result()
            client.forward_backward(data[1:], "cross_entropy").result()
        else:
            client.forward_backward(data, "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        return client.forward(data, "cross_entropy").result().metrics["loss:sum"]

    assert trained(split=True) == pytest.approx(trained(split=False), rel=1e-4)


@pytest.mark.parametrize("loss_fn,config", [("importance_sampling", None), ("ppo", {"clip_low_threshold": 0.7}),
                                            ("cispo", None), ("dro", {"beta": 0.1})])
def test_every_builtin_policy_loss_trains(training, loss_fn, config):
    tokenizer = training.get_tokenizer()
    result = training.forward_backward([rl_datum(tokenizer, 1.0)], loss_fn, config).result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()
    assert math.isfinite(result.metrics["loss:sum"])
    outputs = result.loss_fn_outputs[0]
    assert np.isfinite(outputs["logprobs"].to_numpy()).all()
    assert outputs["elementwise_loss"].to_numpy().sum() == pytest.approx(result.metrics["loss:sum"], rel=1e-4)


def test_a_bad_loss_name_and_an_unknown_config_key_are_bad_requests_that_name_them(training):
    datum = sft_datum(training.get_tokenizer())
    with pytest.raises(tinker.BadRequestError, match="not_a_loss"):
        training.forward_backward([datum], "not_a_loss").result()
    with pytest.raises(tinker.BadRequestError, match="clip_typo"):
        training.forward_backward([rl_datum(training.get_tokenizer(), 1.0)], "ppo", {"clip_typo": 1.0}).result()


def test_an_unknown_base_model_is_a_bad_request(service_client):
    with pytest.raises(tinker.BadRequestError, match="unknown base_model"):
        service_client.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result()


def test_save_and_load_state_with_and_without_optimizer(service_client, training):
    tokenizer = training.get_tokenizer()
    datum = sft_datum(tokenizer, "checkpoint me")
    path = training.save_state("contract-state").result().path
    assert path == f"tinker://{training.model_id}/weights/contract-state"
    before = training.forward([datum], "cross_entropy").result().metrics["loss:sum"]
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    assert training.forward([datum], "cross_entropy").result().metrics["loss:sum"] != pytest.approx(before)
    training.load_state(path).result()
    assert training.forward([datum], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(before, rel=1e-5)
    training.load_state_with_optimizer(path).result()
    restored = service_client.create_training_client_from_state_with_optimizer(path).result()
    fresh = service_client.create_training_client_from_state(path).result()
    for client in (restored, fresh):
        assert client.forward([datum], "cross_entropy").result().metrics["loss:sum"] == pytest.approx(before, rel=1e-5)


def test_another_tenants_checkpoint_is_not_found(service_client, other_client, training):
    path = training.save_state("private").result().path
    with pytest.raises((tinker.NotFoundError, tinker.RequestFailedError), match="not yours"):
        other_client.create_training_client_from_state(path).result()
    theirs = other_client.create_lora_training_client(base_model=BASE, rank=8).result()
    with pytest.raises((tinker.NotFoundError, tinker.RequestFailedError), match="not yours"):
        theirs.load_state(path).result()


def test_sampling_clients_sample_with_logprobs_and_prompt_logprobs(training):
    tokenizer = training.get_tokenizer()
    prompt = types.ModelInput.from_ints(tokenizer.encode("2+2="))
    sampler = training.save_weights_and_get_sampling_client().result()
    assert sampler.get_base_model() == BASE
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    result = sampler.sample(prompt, 3, params).result()
    assert len(result.sequences) == 3
    for sequence in result.sequences:
        assert 1 <= len(sequence.tokens) <= 6 and len(sequence.logprobs) == len(sequence.tokens)
        assert all(lp <= 0 for lp in sequence.logprobs)
    again = sampler.sample(prompt, 3, params).result()
    assert [s.tokens for s in again.sequences] == [s.tokens for s in result.sequences]  # seeded
    logprobs = sampler.compute_logprobs(prompt).result()
    assert logprobs[0] is None and all(lp is not None and lp < 0 for lp in logprobs[1:])


def test_compute_logprobs_equals_the_trainers_logprobs(training):
    """The sampler's prompt logprobs of a sequence = the Trainer's logprobs of it (forward)."""
    tokenizer = training.get_tokenizer()
    ids = tokenizer.encode("logprob contract: 7 * 6 = 42")
    sampler = training.save_weights_and_get_sampling_client().result()
    from_sampler = sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result()
    forward = training.forward([sft_datum(tokenizer, "logprob contract: 7 * 6 = 42")], "cross_entropy").result()
    from_trainer = forward.loss_fn_outputs[0]["logprobs"].to_numpy()
    assert np.max(np.abs(np.asarray(from_sampler[1:]) - from_trainer)) < 1e-4


def test_named_sampler_weights_make_a_sampling_client_of_the_path(service_client, training):
    path = training.save_weights_for_sampler("contract-sampler").result().path
    assert path.endswith("/sampler_weights/contract-sampler")
    for sampler in (training.create_sampling_client(path), service_client.create_sampling_client(model_path=path)):
        result = sampler.sample(types.ModelInput.from_ints([1, 2, 3]), 1,
                                types.SamplingParams(max_tokens=3, seed=1)).result()
        assert len(result.sequences[0].tokens) >= 1


def test_the_async_forms_work_awaited(service_client):
    async def flow() -> tuple[float, int]:
        client = await service_client.create_lora_training_client(base_model=BASE, rank=4)
        info = await client.get_info_async()
        datum = sft_datum(client.get_tokenizer())
        result = await (await client.forward_backward_async([datum], "cross_entropy"))
        await (await client.optim_step_async(types.AdamParams(learning_rate=1e-2)))
        saved = await (await client.save_state_async("async-state"))
        await (await client.load_state_async(saved.path))
        sampler = await client.save_weights_and_get_sampling_client()
        sample = await sampler.sample_async(types.ModelInput.from_ints([5, 6]), 2, types.SamplingParams(max_tokens=2))
        assert info.model_id == client.model_id
        return result.metrics["loss:sum"], len(sample.sequences)

    loss, count = asyncio.run(flow())
    assert loss > 0 and count == 2


def test_training_runs_and_checkpoints_are_listed_for_their_tenant_only(service_client, other_client, training):
    training.save_state("listed").result()
    rest = service_client.create_rest_client()
    runs = rest.list_training_runs().result().training_runs
    assert training.model_id in {r.training_run_id for r in runs}
    paths = {c.tinker_path for c in rest.list_checkpoints(training.model_id).result().checkpoints}
    assert f"tinker://{training.model_id}/weights/listed" in paths
    theirs = other_client.create_rest_client()
    assert training.model_id not in {r.training_run_id for r in theirs.list_training_runs().result().training_runs}
    with pytest.raises(tinker.NotFoundError):
        theirs.list_checkpoints(training.model_id).result()


def test_a_training_client_is_a_session_job_of_its_tenant_that_succeeds_when_the_client_closes(gateway_stack):
    """The lease is the tenant's own SESSION job (its quota and the fair queue apply); closing the
    ServiceClient finishes it through the gateway's driver lease and job token."""
    from opentinker_api.scheduler.v1 import job_pb2
    from opentinker.client.scheduler_client import SchedulerClient

    client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=f"tml-{gateway_stack.acme_key}")
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    scheduler = SchedulerClient(gateway_stack.stack.address("scheduler"), api_key=gateway_stack.acme_key)
    jobs = [j for j in scheduler.list_jobs() if j.spec.labels.get("tinker/model_id") == training.model_id]
    assert len(jobs) == 1 and jobs[0].spec.type == job_pb2.JOB_TYPE_SESSION and jobs[0].tenant_id == "acme"
    assert jobs[0].state == job_pb2.Job.STATE_RUNNING
    other = SchedulerClient(gateway_stack.stack.address("scheduler"), api_key=gateway_stack.other_key)
    assert training.model_id not in {j.spec.labels.get("tinker/model_id") for j in other.list_jobs()}
    client.close("success").result()
    deadline = time.monotonic() + 30
    while scheduler.get_job(jobs[0].job_id).state == job_pb2.Job.STATE_RUNNING and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scheduler.get_job(jobs[0].job_id).state == job_pb2.Job.STATE_SUCCEEDED


def test_standalone_samplers_of_a_base_model_and_of_an_ended_runs_checkpoint(gateway_stack):
    """No live training run needed: the client session gets a rollout-only SESSION job; a named
    sampler checkpoint samples after its run ended, the same as it did while the run lived."""
    key = f"tml-{gateway_stack.acme_key}"
    trainer_client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=key)
    training = trainer_client.create_lora_training_client(base_model=BASE, rank=4, seed=5).result()
    datum = sft_datum(training.get_tokenizer(), "standalone")
    training.forward_backward([datum], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
    path = training.save_weights_for_sampler("standalone").result().path
    prompt, params = types.ModelInput.from_ints([65, 66, 67]), types.SamplingParams(max_tokens=5, seed=9)
    live = training.create_sampling_client(path).sample(prompt, 2, params).result()
    trainer_client.close("success").result()

    sampling_client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=key)
    after = sampling_client.create_sampling_client(model_path=path).sample(prompt, 2, params).result()
    assert [s.tokens for s in after.sequences] == [s.tokens for s in live.sequences]
    assert np.allclose([s.logprobs for s in after.sequences], [s.logprobs for s in live.sequences], atol=1e-4)
    base = sampling_client.create_sampling_client(base_model=BASE)
    assert base.get_base_model() == BASE
    assert len(base.sample(prompt, 1, params).result().sequences[0].tokens) >= 1
    sampling_client.close("success").result()


def test_a_sampler_of_an_untrained_model_samples_the_base_model(service_client):
    training = service_client.create_lora_training_client(base_model=BASE, rank=4).result()
    prompt, params = types.ModelInput.from_ints([70, 71]), types.SamplingParams(max_tokens=4, seed=2)
    snapshot = training.save_weights_and_get_sampling_client().result().sample(prompt, 1, params).result()
    base = service_client.create_sampling_client(base_model=BASE).sample(prompt, 1, params).result()
    assert snapshot.sequences[0].tokens == base.sequences[0].tokens


def test_a_base_models_tokenizer_loads_by_name_from_the_gateways_hub_endpoint(gateway_stack, tmp_path):
    """HF_ENDPOINT=<gateway>/hf: AutoTokenizer.from_pretrained(<catalog name>) works on any client
    (SamplingClient.get_tokenizer and tinker-cookbook load tokenizers by model name)."""
    import subprocess
    import sys

    script = ("import sys\nfrom transformers import AutoTokenizer\n"
              f"t = AutoTokenizer.from_pretrained({BASE!r})\nprint(t.decode(t.encode({TEXT!r})), t.eos_token)\n"
              "try:\n    AutoTokenizer.from_pretrained('not-in-the-catalog')\nexcept OSError:\n    print('missing')\n")
    env = {**os.environ, "HF_ENDPOINT": f"{gateway_stack.url}/hf", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"{TEXT} <|im_end|>", "missing"]


def test_a_tenant_cancelling_the_session_job_ends_the_training_client(gateway_stack):
    from opentinker_api.scheduler.v1 import job_pb2
    from opentinker.client.scheduler_client import SchedulerClient

    client = tinker.ServiceClient(base_url=gateway_stack.url, api_key=f"tml-{gateway_stack.acme_key}")
    training = client.create_lora_training_client(base_model=BASE, rank=4).result()
    scheduler = SchedulerClient(gateway_stack.stack.address("scheduler"), api_key=gateway_stack.acme_key)
    job = next(j for j in scheduler.list_jobs() if j.spec.labels.get("tinker/model_id") == training.model_id)
    scheduler.cancel_job(job.job_id)
    deadline = time.monotonic() + 30
    while scheduler.get_job(job.job_id).state != job_pb2.Job.STATE_CANCELLED and time.monotonic() < deadline:
        time.sleep(0.2)
    assert scheduler.get_job(job.job_id).state == job_pb2.Job.STATE_CANCELLED
    with pytest.raises((tinker.NotFoundError, tinker.RequestFailedError)):
        training.forward([sft_datum(training.get_tokenizer())], "cross_entropy").result()
    client.close("success").result()


def test_forward_backward_custom_runs_a_client_side_loss_like_the_builtin_one(service_client):
    """The SDK's custom loss: a forward for logprobs, the loss and its gradient on the client, then a
    cross_entropy backward with weights = -dloss/dlogprobs. A loss equal to cross_entropy trains the same."""
    import torch

    def nll(data, logprobs_list):
        loss = sum(-(lp * torch.tensor(d.loss_fn_inputs["weights"].data)).sum() for d, lp in zip(data, logprobs_list))
        return loss, {"custom_nll": float(loss)}

    results = {}
    for mode in ("builtin", "custom"):
        client = service_client.create_lora_training_client(base_model=BASE, rank=4, seed=21).result()
        data = [sft_datum(client.get_tokenizer(), "custom losses run here")]
        if mode == "custom":
            out = client.forward_backward_custom(data, nll).result()
            assert out.metrics["custom_nll"] > 0
        else:
            client.forward_backward(data, "cross_entropy").result()
        client.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        results[mode] = client.forward(data, "cross_entropy").result().metrics["loss:sum"]
    assert results["custom"] == pytest.approx(results["builtin"], rel=1e-4)


def test_the_remaining_awaitable_forms(service_client, training):
    async def flow() -> None:
        capabilities = await service_client.get_server_capabilities_async()
        assert BASE in {m.model_name for m in capabilities.supported_models}
        datum = sft_datum(training.get_tokenizer(), "awaited forms")
        forward = await (await training.forward_async([datum], "cross_entropy"))
        assert forward.metrics["loss:sum"] > 0
        path = (await (await training.save_state_async("awaited"))).path
        await (await training.load_state_with_optimizer_async(path))
        from_state = await service_client.create_training_client_from_state_async(path)
        assert (await from_state.get_info_async()).lora_rank == training.get_info().lora_rank
        sampler_path = (await (await training.save_weights_for_sampler_async("awaited-sampler"))).path
        sampler = await training.create_sampling_client_async(sampler_path)
        also = await service_client.create_sampling_client_async(model_path=sampler_path)
        assert await sampler.get_base_model_async() == BASE == await also.get_base_model_async()
        logprobs = await sampler.compute_logprobs_async(types.ModelInput.from_ints([72, 105, 33]))
        assert logprobs[0] is None and len(logprobs) == 3

    asyncio.run(flow())


def test_a_sampler_handle_makes_another_client_of_the_same_sampler(gateway_stack, training):
    sampler = training.save_weights_and_get_sampling_client().result()
    again = tinker.SamplingClient.from_sampler_handle(sampler.get_sampler_handle(), api_key=f"tml-{gateway_stack.acme_key}")
    prompt, params = types.ModelInput.from_ints([80, 81]), types.SamplingParams(max_tokens=4, seed=4)
    assert again.sample(prompt, 1, params).result().sequences[0].tokens == \
        sampler.sample(prompt, 1, params).result().sequences[0].tokens
    with pytest.raises((tinker.NotFoundError, tinker.RequestFailedError)):  # the handle carries no credentials
        tinker.SamplingClient.from_sampler_handle(sampler.get_sampler_handle(), api_key=f"tml-{gateway_stack.other_key}") \
            .sample(prompt, 1, params).result()


def test_calls_the_gateway_does_not_serve_are_bad_requests_that_say_so(training):
    with pytest.raises(tinker.BadRequestError, match="save_weights_external is not supported"):
        training.save_weights_external("external").result()
    # the refused call used a seq_id on the client: the model's next calls still run
    datum = sft_datum(training.get_tokenizer(), "after a refusal")
    assert training.forward([datum], "cross_entropy").result(timeout=60).metrics["loss:sum"] > 0


def test_sampling_parameters_take_effect(training):
    """stop strings and stop token ids end a sample (kept, stop reason "stop"), max_tokens cuts it
    (reason "length"), top_k=1 is greedy whatever the temperature and seed."""
    tokenizer = training.get_tokenizer()
    sampler = training.save_weights_and_get_sampling_client().result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("stop here"))
    free = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, temperature=1.0, seed=5)).result().sequences[0]
    assert free.stop_reason in ("length", "stop") and 1 <= len(free.tokens) <= 12
    stop_token = free.tokens[2]
    cut = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, seed=5, stop=[stop_token])).result().sequences[0]
    assert cut.tokens == free.tokens[:free.tokens.index(stop_token) + 1] and cut.stop_reason == "stop"
    text = tokenizer.decode(free.tokens[:3])
    by_text = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=12, seed=5, stop=[text])).result().sequences[0]
    assert tokenizer.decode(by_text.tokens).endswith(text) and len(by_text.tokens) <= 3 + 1
    short = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2, seed=5)).result().sequences[0]
    assert len(short.tokens) == 2 and short.stop_reason == "length"
    greedy = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0.0)).result().sequences[0]
    for seed in (1, 2):
        top1 = sampler.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=1.0, top_k=1, seed=seed))
        assert top1.result().sequences[0].tokens == greedy.tokens
