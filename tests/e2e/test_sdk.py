"""The paper's client workflow against the live stack: fit with callbacks, then inference."""

from opentinker.client import InferenceSchedulerClient, ServiceClient


def test_fit_streams_metrics_to_callbacks_and_inference_reuses_the_checkpoint(stack, tmp_path):
    seen: list[int] = []
    client = ServiceClient(stack.address("scheduler"))
    result = client.fit(env={"env_name": "math", "config": {"seed": 5, "eval_size": 4}},
                        model={"builtin": {"name": "tiny-qwen2", "seed": 5}}, num_steps=2, batch_size=2,
                        group_size=2, algorithm={"optimizer": {"learning_rate": 1e-3}},
                        sampling={"max_new_tokens": 3, "temperature": 1.0}, training={"eval_episodes": 4},
                        on_metrics=lambda step, metrics: seen.append(step))
    assert result.succeeded, result.job.status_message
    assert [step for step, _ in result.series("reward/mean")] == [1, 2]
    assert seen.count(1) >= 1 and seen.count(2) >= 1 and seen == sorted(seen)
    assert result.final_checkpoint_id.endswith("final")

    output = tmp_path / "eval.jsonl"
    scheduler = InferenceSchedulerClient(stack.address("scheduler"))
    job = scheduler.submit_inference_job(model={"checkpoint": {"checkpoint_id": result.final_checkpoint_id}},
                                         env_name="math", env_config={"seed": 5, "eval_size": 4},
                                         num_episodes=4, output_path=str(output), max_new_tokens=3)
    final = scheduler.wait(job.job_id)
    assert final.status_message.startswith(f"wrote 4 episodes to {output}")
    assert len(output.read_text().splitlines()) == 4
