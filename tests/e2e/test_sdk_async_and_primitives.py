"""The SDK's asyncio clients and its Tinker-style primitives against the live stack."""

from __future__ import annotations

import asyncio

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import (
    AsyncSchedulerClient, AsyncServiceClient, NotFound, SamplingClient, TrainingClient, datum,
)
from harness.job_specs import rl_spec

MODEL = {"builtin": {"name": "tiny-llama", "seed": 11}}
LORA = {"lora": {"rank": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "lm_head"]}}


def test_async_clients_submit_watch_list_and_fit(stack):
    address = stack.address("scheduler")

    async def scenario() -> tuple:
        async with AsyncSchedulerClient(address) as scheduler:
            job = await scheduler.submit_job(rl_spec(total_steps=1))
            sequences = [event.sequence async for event in scheduler.watch_job(job.job_id)]
            final = await scheduler.get_job(job.job_id)
            listed = [j.job_id async for j in scheduler.list_jobs(page_size=1)]
            roles = sorted({w.role async for w in scheduler.list_workers()})
            with pytest.raises(NotFound) as missing:
                await scheduler.get_job("no-such-job")
        async with AsyncServiceClient(address) as service:
            seen: list[int] = []
            fitted = await service.fit(env={"env_name": "math", "config": {"seed": 2, "eval_size": 2}},
                                       model=MODEL, num_steps=2, batch_size=2, group_size=2,
                                       algorithm={"optimizer": {"learning_rate": 1e-3}},
                                       sampling={"max_new_tokens": 3}, training={"eval_episodes": 2},
                                       on_metrics=lambda step, _: seen.append(step))
        return job, sequences, final, listed, roles, missing.value, fitted, seen

    job, sequences, final, listed, roles, missing, fitted, seen = asyncio.run(scenario())
    assert sequences == list(range(1, len(sequences) + 1)) and len(sequences) > 3
    assert final.state == job_pb2.Job.STATE_SUCCEEDED
    assert job.job_id in listed  # found across pages of one
    assert len(roles) >= 4  # trainer, rollout, envhost, coordinator workers
    assert missing.reason == "JOB_NOT_FOUND"
    assert fitted.succeeded and [s for s, _ in fitted.series("reward/mean")] == [1, 2]
    assert 1 in seen and 2 in seen


def test_primitives_train_sample_and_sync_weights(stack):
    with TrainingClient(stack.address("trainer"), base_model=MODEL, adaptation=LORA,
                        learning_rate=5e-2, seed=3) as trainer, \
         SamplingClient(stack.address("rollout"), model=MODEL, adaptation=LORA) as sampler:
        prompt = list(b"12+34=")
        results = sampler.sample([prompt], max_new_tokens=4, temperature=1.0, n=4, seed=9)
        completions = results[0].completions
        assert len(completions) == 4 and all(len(c.logprobs) == len(c.tokens) for c in completions)
        datums = [datum(prompt, c.tokens, advantage=1.0 if i % 2 else -1.0, sampling_logprobs=c.logprobs)
                  for i, c in enumerate(completions)]

        # before any update the Trainer scores the sampled tokens as the Rollout did
        scored = trainer.compute_logprobs([[*prompt, *completions[0].tokens]])[0]
        sampled = list(completions[0].logprobs)
        assert max(abs(a - b) for a, b in zip(scored[-len(sampled):], sampled, strict=True)) < 1e-3

        result = trainer.forward_backward(datums, {"function": "PPO_CLIP", "clip_low": 0.2, "clip_high": 0.2})
        assert result.num_tokens == sum(len(c.tokens) for c in completions)
        step = trainer.optim_step()
        assert (step.step, step.policy_version) == (1, 1) and step.grad_norm > 0

        assert sampler.load_weights_from(trainer) == 1
        again = sampler.sample([prompt], max_new_tokens=4, temperature=1.0, n=4, seed=9)
        assert again[0].completions[0].policy_version == 1
        changed = [list(a.logprobs) != list(b.logprobs) for a, b in zip(completions, again[0].completions)]
        assert any(changed)  # the new adapter reached the Rollout

        checkpoint = trainer.save_state("sdk")
        assert checkpoint.checkpoint_id and checkpoint.step == 1
        assert trainer.load_state(checkpoint.checkpoint_id).step == 1
