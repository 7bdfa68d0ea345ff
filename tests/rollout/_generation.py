"""Generation on the builtin tiny model, for the engine and batching tests: chat prompts of
different lengths, a request, each token's reference logprob from a full forward, and driving
the engine step by step."""

from __future__ import annotations

import torch

from opentinker_runtime.ml.chat import render_prompt
from opentinker_rollout.engine import GenerationRequest, SamplingConfig
from opentinker_rollout.sampling import processed_logprobs, row_params
from tests.rollout._support import full_forward_logprobs, tiny_model


def prompts() -> list[tuple[int, ...]]:
    """Chat prompts of different lengths (so a batch needs left padding)."""
    tokenizer = tiny_model().tokenizer
    questions = ["1+1?", "What is 12 times 7?", "Name a colour.", "Add 123 and 456, then halve it."]
    return [tuple(render_prompt(tokenizer, [{"role": "system", "content": "Answer."},
                                            {"role": "user", "content": q}])) for q in questions]


def request(prompt, **sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=prompt, sampling=SamplingConfig(**sampling))


def reference_logprobs(prompt, tokens, temperature=1.0, top_k=0, top_p=1.0) -> list[float]:
    """Logprob of each generated token under the processed distribution of a full forward."""
    logprobs_T_V = full_forward_logprobs(tiny_model().model, [*prompt, *tokens])
    rows = logprobs_T_V[len(prompt) - 1: len(prompt) - 1 + len(tokens)]
    params = row_params([temperature] * len(tokens), [top_k] * len(tokens), [top_p] * len(tokens))
    processed = processed_logprobs(rows, params)  # log_softmax is shift-invariant: logits = logprobs
    return processed.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1).tolist()


def drive(engine, arrivals: dict[int, list[tuple[str, GenerationRequest]]]) -> dict[str, list]:
    """Step the engine; at step s admit arrivals[s]; run until every request is answered."""
    answers: dict[str, list] = {}
    expected = sum(len(batch) for batch in arrivals.values())
    step = 0
    while len(answers) < expected:
        answers.update(engine.advance(arrivals.get(step, [])))
        step += 1
        assert step < 500, "the engine never finished"
    return answers
