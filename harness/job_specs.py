"""The small job specs tests submit to a live stack, from one factory.

Each function returns a new dict in the JSON form every client accepts (`submit_job(spec)`,
`opentinker submit FILE`); a caller names only what its test is about and merges top-level
fields with `|` (`rl_spec(4) | {"async": {...}}`). The defaults make a job that runs in seconds
on CPU: a built-in tiny model, full fine-tuning, the built-in math game, two prompts of two
episodes per step.
"""

from __future__ import annotations

from typing import Any

TINY_QWEN = "tiny-qwen2"
TINY_LLAMA = "tiny-llama"


def builtin_model(name: str = TINY_QWEN, seed: int = 3) -> dict[str, Any]:
    """A built-in tiny model with random weights from `seed`."""
    return {"builtin": {"name": name, "seed": seed}}


def checkpoint_model(checkpoint_id: str) -> dict[str, Any]:
    return {"checkpoint": {"checkpoint_id": checkpoint_id}}


def local_model(path: str) -> dict[str, Any]:
    return {"local": {"path": path}}


def full() -> dict[str, Any]:
    """Full fine-tuning (every weight trains)."""
    return {"full": {}}


def lora(rank: int = 4, alpha: float = 8) -> dict[str, Any]:
    return {"lora": {"rank": rank, "alpha": alpha}}


def math_env(seed: int = 3, eval_size: int = 4, **config: Any) -> dict[str, Any]:
    """The built-in math game; `eval_size` held-out problems; `config` adds to its config."""
    return {"env_name": "math", "config": {"seed": seed, "eval_size": eval_size, **config}}


def sampling_params(max_new_tokens: int = 4, temperature: float = 1.0, **more: Any) -> dict[str, Any]:
    return {"max_new_tokens": max_new_tokens, "temperature": temperature, **more}


def rl_spec(total_steps: int, *, name: str | None = "e2e", seed: int = 3, model: dict[str, Any] | None = None,
            adaptation: dict[str, Any] | None = None, learning_rate: float = 1e-3,
            sampling: dict[str, Any] | None = None, environment: dict[str, Any] | None = None,
            **training: Any) -> dict[str, Any]:
    """A tiny RL (GRPO) job: `builtin_model(TINY_QWEN, seed)`, full fine-tuning, `sampling_params()`,
    `math_env(seed)`, and training {batch_size 2, group_size 2, eval_episodes 4,
    checkpoint_every_steps 2, seed} updated by `training` (a None value leaves the field out)."""
    fields = {"batch_size": 2, "group_size": 2, "eval_episodes": 4, "checkpoint_every_steps": 2, "seed": seed}
    spec: dict[str, Any] = {"type": "RL"}
    if name is not None:
        spec["display_name"] = name
    spec["policy"] = {"model": model or builtin_model(TINY_QWEN, seed), "adaptation": adaptation or full(),
                      "algorithm": {"optimizer": {"learning_rate": learning_rate}},
                      "sampling": sampling or sampling_params()}
    spec["environment"] = environment or math_env(seed)
    spec["training"] = _without_none({"total_steps": total_steps, **fields, **training})
    return spec


def sft_spec(dataset_path: str, *, total_steps: int = 1, batch_size: int = 1, name: str | None = None,
             model: dict[str, Any] | None = None, adaptation: dict[str, Any] | None = None,
             learning_rate: float = 1e-3, **training: Any) -> dict[str, Any]:
    """A tiny SFT job on a chat JSONL file (`builtin_model(TINY_QWEN, 4)`, full fine-tuning)."""
    spec: dict[str, Any] = {"type": "SFT"}
    if name is not None:
        spec["display_name"] = name
    spec["policy"] = {"model": model or builtin_model(TINY_QWEN, 4), "adaptation": adaptation or full(),
                      "algorithm": {"optimizer": {"learning_rate": learning_rate}}}
    spec["dataset"] = {"path": dataset_path}
    spec["training"] = _without_none({"total_steps": total_steps, "batch_size": batch_size, **training})
    return spec


def inference_spec(*, model: dict[str, Any] | None = None, environment: dict[str, Any] | None = None,
                   num_episodes: int = 2, output_path: str = "", max_new_tokens: int = 4) -> dict[str, Any]:
    """An inference job: `num_episodes` held-out episodes of `model` (default
    `builtin_model(TINY_QWEN, 3)`) on `environment` (default `math_env(3, eval_size=2)`),
    written as JSONL to `output_path` ("": the job's own output area)."""
    return {"type": "INFERENCE",
            "policy": {"model": model or builtin_model(TINY_QWEN, 3), "sampling": {"max_new_tokens": max_new_tokens}},
            "environment": environment or math_env(3, eval_size=2),
            "inference": {"num_episodes": num_episodes, "output_path": output_path}}


def chaos_spec(total_steps: int) -> dict[str, Any]:
    """A tiny asynchronous RL job (the Rollout one step ahead, new weights swapped in while it
    generates) that checkpoints every step and may be re-queued many times: a resumed attempt
    plays the rollouts that were in flight again, so no prompt is trained twice or skipped."""
    return rl_spec(total_steps, checkpoint_every_steps=1, max_retries=100) | {
        "async": {"max_staleness": 1, "in_flight": "IN_FLIGHT_SWAP_WEIGHTS"}}


def _without_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}
