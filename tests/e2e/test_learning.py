"""CI's short learning check: RL through the five services raises train reward.

A format-only SFT warm-up (answers spread over 0-9, on questions RL never sees) leaves the
policy guessing on four fixed problems; GRPO then has to find and reinforce the right answers.
The full demo and its held-out numbers live in examples/math_rl.py and bench/math_rl_seeds.py.
"""

from __future__ import annotations

import json

from opentinker.client import SchedulerClient, ServiceClient
from harness.job_specs import builtin_model, checkpoint_model, rl_spec, sft_spec

SYSTEM = "Answer with the number only."
RL_PROBLEMS = [("2+3=", "5"), ("4+1=", "5"), ("1+2=", "3"), ("3+3=", "6")]
HELD_OUT = [("1+1=", "2"), ("2+2=", "4")]
FORMAT_EXAMPLES = [("0+9=", "9"), ("1+7=", "8"), ("2+5=", "7"), ("3+1=", "4"), ("4+2=", "6"), ("5+0=", "5"),
                   ("6+2=", "8"), ("7+0=", "7"), ("8+1=", "9"), ("0+3=", "3"), ("1+0=", "1"), ("0+2=", "2"),
                   ("0+0=", "0"), ("2+4=", "6"), ("4+0=", "4"), ("3+2=", "5")]
SEED = 1
RL_STEPS = 20
WINDOW = 5


def write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def chat(question: str, answer: str) -> dict:
    return {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question},
                         {"role": "assistant", "content": answer}]}


def test_grpo_raises_train_reward_after_a_format_only_warm_up(stack, tmp_path):
    scheduler, client = SchedulerClient(stack.address("scheduler")), ServiceClient(stack.address("scheduler"))
    sft_data = write_jsonl(tmp_path / "sft.jsonl", [chat(q, a) for q, a in FORMAT_EXAMPLES])
    problems = write_jsonl(tmp_path / "problems.jsonl",
                           [{"question": q, "answer": a, "split": "train"} for q, a in RL_PROBLEMS]
                           + [{"question": q, "answer": a, "split": "eval"} for q, a in HELD_OUT])
    sft = client.follow(scheduler.submit_job(sft_spec(sft_data, total_steps=40, batch_size=8, seed=SEED,
                                                      model=builtin_model(seed=SEED), learning_rate=1e-2)).job_id)
    assert sft.succeeded, sft.job.status_message
    rl = client.follow(scheduler.submit_job(rl_spec(
        RL_STEPS, name=None, seed=SEED, model=checkpoint_model(sft.final_checkpoint_id), learning_rate=3e-3,
        environment={"env_name": "math", "config": {"dataset_path": problems}}, batch_size=4, group_size=8,
        eval_episodes=2, checkpoint_every_steps=None)).job_id)
    assert rl.succeeded, rl.job.status_message
    rewards = [value for _, value in rl.series("reward/mean")]
    assert len(rewards) == RL_STEPS
    first, last = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    assert last >= first + 0.15, f"reward did not go up: {rewards}"
