"""Shared builders for the Trainer tests: sessions over tiny builtin models and chat datums."""

from __future__ import annotations

from pathlib import Path

import torch

from opentinker_runtime.ml.chat import render_sft_example
from opentinker_runtime.ml.logprobs import token_logprobs
from opentinker_runtime.ml.sources import LoraSpec, ModelSource
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer
from opentinker_trainer.batching import Datum
from opentinker_trainer.config import LossConfig, LossFunction, OptimizerConfig, SessionSpec
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.session_factory import create_session

MODEL = "tiny-qwen2"
CE = LossConfig(function=LossFunction.CROSS_ENTROPY)
PPO = LossConfig(function=LossFunction.PPO_CLIP, clip_low=0.2, clip_high=0.28)
PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8)]


def chat_messages(a: int, b: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Answer with the number."},
            {"role": "user", "content": f"What is {a}+{b}?"},
            {"role": "assistant", "content": f"{a + b}"}]


def sft_datums(pairs=PAIRS) -> list[Datum]:
    tokenizer = build_byte_tokenizer()
    rendered = [render_sft_example(tokenizer, chat_messages(a, b)) for a, b in pairs]
    return [Datum(tokens=tuple(t), loss_mask=tuple(float(m) for m in mask)) for t, mask in rendered]


def rl_datums(count: int = 4, length: int = 12, seed: int = 0, old_shift: float = 0.0) -> list[Datum]:
    """Random sequences with advantages +-1 and made-up sampling logprobs."""
    g = torch.Generator().manual_seed(seed)
    datums = []
    for index in range(count):
        n = length - index
        tokens = torch.randint(0, 256, (n,), generator=g).tolist()
        datums.append(Datum(tokens=tuple(tokens), loss_mask=(0.0, 0.0) + (1.0,) * (n - 2),
                            advantages=(1.0 if index % 2 else -1.0,) * n,
                            sampling_logprobs=tuple((-5.5 + old_shift,) * n)))
    return datums


def spec(*, lora: LoraSpec | None = None, lr: float = 1e-2, keep_reference: bool = False,
         max_tokens: int = 0, seed: int = 0, job_id: str = "", model: str = MODEL) -> SessionSpec:
    return SessionSpec(base=ModelSource.builtin(model, 0), lora=lora, keep_reference=keep_reference,
                       optimizer=OptimizerConfig(learning_rate=lr, max_grad_norm=1.0), seed=seed,
                       max_tokens_per_micro_batch=max_tokens, job_id=job_id)


def session(root: Path | None = None, **kwargs) -> TrainingSession:
    return create_session("sess-test", spec(**kwargs), checkpoint_root=root or Path("."))


def weights(s: TrainingSession) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in s.model.named_parameters()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def rows_close(a: list[list[float]], b: list[list[float]], atol: float = 1e-5) -> bool:
    """Ragged lists of per-token numbers are equal within `atol`."""
    return len(a) == len(b) and all(
        len(x) == len(y) and torch.allclose(torch.tensor(x), torch.tensor(y), atol=atol)
        for x, y in zip(a, b))


def policy_logprobs(model) -> torch.Tensor:
    """logprobs_1_T of the first SFT example under `model` (eval mode, no gradients)."""
    tokens = torch.tensor([list(sft_datums()[0].tokens)])
    with torch.no_grad():
        return token_logprobs(model.eval(), tokens, torch.ones_like(tokens))
