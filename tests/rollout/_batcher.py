"""An engine stand-in that answers each row with its first prompt token and counts its calls'
rows, and a one-token request, for the batcher tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from opentinker_rollout.engine import FinishReason, Generation, GenerationRequest, SamplingConfig
from tests.rollout._support import EOS


class CountingEngine:
    """Answers each row with [first prompt token] after `delay_s`; records every call's rows."""

    max_context_length = 1024
    eos_token_ids = (EOS,)

    def __init__(self, delay_s: float = 0.02, fail: bool = False) -> None:
        self.delay_s = delay_s
        self.fail = fail
        self.calls: list[int] = []
        self.running = threading.Event()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Generation]]:
        self.running.set()
        self.calls.append(sum(r.sampling.n for r in requests))
        time.sleep(self.delay_s)
        self.running.clear()
        if self.fail:
            raise RuntimeError("engine exploded")
        return [[Generation(token_ids=(r.prompt_ids[0], EOS), logprobs=(-1.0, -1.0),
                            finish_reason=FinishReason.STOP)] * r.sampling.n for r in requests]

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(list(token_ids))


def req(first: int, n: int = 1) -> GenerationRequest:
    return GenerationRequest(prompt_ids=(first,), sampling=SamplingConfig(n=n))
