"""examples/nim_rl.py: its warm-up player plays legal moves, and its RL job passes the
Scheduler's validation with the multi-turn recipe in it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from opentinker_api.common.v1 import algorithm_pb2
from opentinker.client.service_client import fit_job_spec
from opentinker.client.spec import job_spec_from_dict
from opentinker_runtime.jobplan import resolve_job_plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nim_rl.py"


def example():
    spec = importlib.util.spec_from_file_location("nim_rl_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_warm_up_player_plays_legal_moves():
    for chat in example().warmup_chats(0, 50):
        messages = chat["messages"]
        for prompt, reply in zip(messages[1::2], messages[2::2], strict=False):
            stones = int(prompt["content"].split("Stones: ")[1].split(".")[0])
            assert 1 <= int(reply["content"]) <= min(3, stones)


def test_the_rl_job_is_valid_and_carries_the_recipe():
    job = fit_job_spec(**example().rl_arguments("job-0123-final", seed=1, steps=150))
    message = job_spec_from_dict(job)
    resolve_job_plan(message)  # the Scheduler's checks: every rule of the spec
    algorithm = message.policy.algorithm
    assert abs(algorithm.loss.kl_coef - 0.1) < 1e-6 and message.policy.adaptation.full.keep_reference
    assert algorithm_pb2.AdvantageEstimator.Name(algorithm.advantage.estimator).endswith("DISCOUNTED_RETURN")
    assert message.policy.limits.max_turns == 8 and message.environment.env_name == "nim"
    assert getattr(message, "async").max_staleness == 1
