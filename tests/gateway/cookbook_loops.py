"""tinker-cookbook's own loops on a built-in model, as a user's launcher script runs them.

    python -m tests.gateway.cookbook_loops sl --log-path DIR --data conversations.jsonl
    python -m tests.gateway.cookbook_loops rl --log-path DIR

`tinker_cookbook.supervised.train.main` and `tinker_cookbook.rl.train.main` run unchanged; this
file only builds their configs (the built-in `tiny-llama`, the generic `role_colon` renderer named
explicitly) and, for RL, defines a task with the cookbook's Env API. The SDK reads
TINKER_BASE_URL and TINKER_API_KEY; the cookbook's `get_tokenizer("tiny-llama")` loads the
gateway's byte tokenizer through HF_ENDPOINT=<gateway>/hf.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl import train as rl_train
from tinker_cookbook.rl.types import (
    Action,
    ActionExtra,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)
from tinker_cookbook.supervised import train as sl_train
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig
from tinker_cookbook.tokenizer_utils import get_tokenizer

MODEL = "tiny-llama"
RENDERER = "role_colon"
LOWERCASE = range(ord("a"), ord("z") + 1)
"""The byte tokenizer's ids 0..255 are bytes, so a lowercase letter is one token in this range."""


class LowercaseEnv(Env):
    """One turn: "Answer in lowercase letters."; the reward is the share of the answer's tokens
    that are lowercase ASCII letters (about 26/260 for random weights, 1 when learnt)."""

    def __init__(self, renderer: renderers.Renderer) -> None:
        self.renderer = renderer

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        prompt = self.renderer.build_generation_prompt([{"role": "user", "content": "Answer in lowercase letters."}])
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        lowercase = sum(token in LOWERCASE for token in action) / max(len(action), 1)
        return StepResult(reward=lowercase, episode_done=True, next_observation=tinker.ModelInput.empty(),
                          next_stop_condition=self.renderer.get_stop_sequences(), metrics={"lowercase": lowercase})


class LowercaseGroupBuilder(EnvGroupBuilder):
    """`group_size` copies of the env: rewards are centred within the group (GRPO)."""

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size

    async def make_envs(self) -> Sequence[Env]:
        renderer = renderers.get_renderer(RENDERER, get_tokenizer(MODEL))
        return [LowercaseEnv(renderer) for _ in range(self.group_size)]

    def logging_tags(self) -> list[str]:
        return ["lowercase"]


class LowercaseDataset(RLDataset):
    def __init__(self, *, batches: int, groups_per_batch: int, group_size: int) -> None:
        self.batches, self.groups_per_batch, self.group_size = batches, groups_per_batch, group_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [LowercaseGroupBuilder(self.group_size) for _ in range(self.groups_per_batch)]

    def __len__(self) -> int:
        return self.batches


@chz.chz
class LowercaseDatasetBuilder(RLDatasetBuilder):
    batches: int
    groups_per_batch: int = 4
    group_size: int = 8

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return LowercaseDataset(batches=self.batches, groups_per_batch=self.groups_per_batch,
                                group_size=self.group_size), None


def sl_config(*, log_path: str, data: str, batch_size: int, learning_rate: float) -> sl_train.Config:
    common = ChatDatasetBuilderCommonConfig(model_name_for_tokenizer=MODEL, renderer_name=RENDERER,
                                            max_length=512, batch_size=batch_size)
    return sl_train.Config(log_path=log_path, model_name=MODEL, recipe_name="opentinker_cookbook_sl",
                           renderer_name=RENDERER, dataset_builder=FromConversationFileBuilder(
                               common_config=common, file_path=data),
                           learning_rate=learning_rate, lr_schedule="constant", num_epochs=1, lora_rank=8,
                           save_every=0, eval_every=0, infrequent_eval_every=0)


def rl_config(*, log_path: str, steps: int, learning_rate: float) -> rl_train.Config:
    return rl_train.Config(log_path=log_path, model_name=MODEL, recipe_name="opentinker_cookbook_rl",
                           renderer_name=RENDERER, dataset_builder=LowercaseDatasetBuilder(batches=steps),
                           learning_rate=learning_rate, max_tokens=8, lora_rank=8, loss_fn="importance_sampling",
                           eval_every=0, save_every=0, num_groups_to_log=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("loop", choices=["sl", "rl"])
    parser.add_argument("--log-path", required=True)
    parser.add_argument("--data", help="JSONL of {'messages': [...]} conversations (sl)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10, help="RL steps (sl runs one epoch of --data)")
    parser.add_argument("--learning-rate", type=float,
                        help="default 1e-2 for sl, 5e-3 for rl (at 1e-2 the policy can overshoot and fall back)")
    args = parser.parse_args()
    if args.loop == "sl":
        config = sl_config(log_path=args.log_path, data=args.data, batch_size=args.batch_size,
                           learning_rate=args.learning_rate or 1e-2)
        asyncio.run(sl_train.main(config))
    else:
        asyncio.run(rl_train.main(rl_config(log_path=args.log_path, steps=args.steps,
                                            learning_rate=args.learning_rate or 5e-3)))


if __name__ == "__main__":
    main()
