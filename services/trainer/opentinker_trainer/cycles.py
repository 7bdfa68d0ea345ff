"""A clock cycle: the ForwardBackward calls that several LoRA sessions of one shared base have
queued, run as one batched forward/backward over the base (`adapter_router`), each row through
its own session's adapter.

Every session keeps its own loss: its rows' objective uses its LossConfig and its batch's
denominators (`training.batch_norm`), and the cycle backpropagates the sum of the sessions'
objectives once per micro-batch (`cycle_pass`; rows that share prompt prefixes run them once,
as alone). A session's adapter appears only in its own rows' computation,
so the gradient it receives is that of its own objective: what it would accumulate alone, up to
float rounding (the rows are padded to a longer batch and summed in another order).

A call joins a cycle when its session stands on a shared base (`shared_base`), trains on one
device, its adapter is plain LoRA without dropout (`adapter_router.lora_updates`), the base has
no dropout, and its loss needs no forward of the policy before the training pass (an importance
mask) nor of the reference (a KL term without the datums' reference logprobs). Any other call,
and every call of a cycle of one, runs alone as before. A call whose datums are invalid fails
alone; if the joint pass fails, the gradients it added are taken back and each call runs
alone, so one session's failure never fails another's call.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from opentinker_trainer.adapter_router import AdapterRouter
from opentinker_trainer.batching import Datum, validate_datums
from opentinker_trainer.config import LossConfig
from opentinker_trainer.memory import MAX_DEFAULT_TOKENS, MICRO_BATCH_TOKENS, PEAK_MEMORY
from opentinker_trainer.metrics import FORWARD_BACKWARD_SECONDS, count_forward_backward, record_cycle
from opentinker_trainer.cycle_pass import PassCall, joint_pass
from opentinker_trainer.session import TrainingSession
from opentinker_trainer.training import CYCLE_SHARE_SECONDS, ForwardBackwardResult, ShardResult, combine


@dataclass(frozen=True, kw_only=True)
class CycleCall:
    """One session's queued ForwardBackward."""

    session: TrainingSession
    datums: Sequence[Datum]
    loss: LossConfig


Outcome = ForwardBackwardResult | BaseException
CPU_CYCLE_TOKENS = MAX_DEFAULT_TOKENS
"""Padded tokens of one micro-batch of a cycle on the CPU at most: what a session alone runs at
most (a CPU forward/backward is no faster per token beyond it). Smaller was slower: with 1,024, a
GRPO call of 16 rows of ~106 tokens ran as two micro-batches of 8 rows where alone it ran one,
and the cycle cost 1.15-1.33x its calls alone (tiny-llama and small-llama, 2 cores); with 2,048
it costs 1.00x. A micro-batch holds several calls only when they fit in it together."""
CYCLE_SESSIONS = "cycle/sessions"
CYCLE_TOKEN_SHARE = "cycle/token_share"
CYCLE_SECONDS = "cycle/seconds"


def joinable(session: TrainingSession, loss: LossConfig, datums: Sequence[Datum]) -> bool:
    """Whether this call may share a cycle with other sessions' calls (see the module's doc)."""
    if session.base is None or session.world_size > 1 or session.spec.lora is None:
        return False
    if loss.masks_importance:
        return False
    if loss.needs_reference and not all(d.reference_logprobs for d in datums):
        return False
    return session.base.routable


def run_cycle(calls: Sequence[CycleCall]) -> list[Outcome]:
    """Each call's result or error, in order; calls that may not join run alone."""
    started = time.perf_counter()
    outcomes: list[Outcome | None] = [None] * len(calls)
    joining: list[int] = []
    for index, call in enumerate(calls):
        if not joinable(call.session, call.loss, call.datums):
            continue
        try:
            _validate(call)
        except Exception as error:  # noqa: BLE001 - the caller's own bad request, reported to it alone
            outcomes[index] = error
            continue
        joining.append(index)
    own_seconds: dict[int, float] = {}
    if len(joining) > 1:
        joint_started = time.perf_counter()
        joint = _joint_or_none([calls[i] for i in joining])
        if joint is not None:
            joint_seconds = time.perf_counter() - joint_started
            for index, result in zip(joining, joint):
                outcomes[index] = result
                own_seconds[index] = joint_seconds
    joined = [i for i in joining if isinstance(outcomes[i], ForwardBackwardResult)]
    for index, call in enumerate(calls):
        if outcomes[index] is None:
            alone_started = time.perf_counter()
            outcomes[index] = _alone(call)
            own_seconds[index] = time.perf_counter() - alone_started
    seconds = time.perf_counter() - started
    record_cycle(joined=len(joined), seconds=seconds)
    return _with_cycle_stats(outcomes, joined, calls, seconds, own_seconds)  # type: ignore[arg-type]


def _with_cycle_stats(outcomes: list[Outcome], joined: list[int], calls: Sequence[CycleCall],
                      seconds: float, pass_seconds: dict[int, float]) -> list[Outcome]:
    """Each result with its cycle's figures: CYCLE_SESSIONS (sessions in the batched pass, 1 for
    a call alone), CYCLE_TOKEN_SHARE (its share of that pass's tokens), CYCLE_SECONDS, and
    CYCLE_SHARE_SECONDS: its share of the time of the pass it ran in (its token share of the
    joint pass's, or its own pass's when alone), the one figure a job's metrics report."""
    tokens = {i: sum(len(d.tokens) for d in calls[i].datums) for i in joined}
    total = sum(tokens.values())
    stamped: list[Outcome] = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, ForwardBackwardResult):
            share = tokens[index] / total if index in tokens else 1.0
            cycle = {CYCLE_SESSIONS: float(len(joined) if index in tokens else 1), CYCLE_TOKEN_SHARE: share,
                     CYCLE_SECONDS: seconds, CYCLE_SHARE_SECONDS: share * pass_seconds.get(index, seconds)}
            outcome = dataclasses.replace(outcome, cycle=cycle)
        stamped.append(outcome)
    return stamped


def _alone(call: CycleCall) -> Outcome:
    try:
        return call.session.forward_backward(call.datums, call.loss)
    except Exception as error:  # noqa: BLE001 - reported to this call's caller
        return error


def _validate(call: CycleCall) -> None:
    info = call.session.info
    validate_datums(call.datums, call.loss, vocab_size=info.vocab_size, max_length=info.max_context_length)


def _joint_or_none(calls: Sequence[CycleCall]) -> list[ForwardBackwardResult] | None:
    """The joint pass's results; None when it failed (its gradients taken back)."""
    saved = [_gradients(call.session) for call in calls]
    for call in calls:
        call.session.memory.start_call()
    started = time.perf_counter()
    try:
        shards = _joint_pass(calls)
    except Exception:  # noqa: BLE001 - each call runs alone next, and reports its own error
        for call, gradients in zip(calls, saved):
            _restore_gradients(call.session, gradients)
        return None
    results = []
    for call, shard in zip(calls, shards):
        result = combine(call.datums, [(range(len(call.datums)), shard)])
        call.session.pending_datums += len(call.datums)
        count_forward_backward(len(call.datums), result.num_tokens)
        FORWARD_BACKWARD_SECONDS.observe(time.perf_counter() - started)  # each call took the whole pass
        memory = {PEAK_MEMORY: call.session.memory.end_call(),
                  MICRO_BATCH_TOKENS: float(call.session.micro_batch_tokens)}
        results.append(dataclasses.replace(result, memory=memory))
    return results


def _joint_pass(calls: Sequence[CycleCall]) -> list[ShardResult]:
    """Backward of every call's objective over routed micro-batches (`cycle_pass`); per call its
    loss, metric sums and logprobs."""
    router = calls[0].session.base.router()
    passing = [PassCall(model=call.session.model, key=_attached(router, call.session), datums=call.datums,
                        loss=call.loss) for call in calls]
    rows = [(c, d) for c, call in enumerate(calls) for d in range(len(call.datums))]
    plan = plan_by_call([len(calls[c].datums[d].tokens) for c, d in rows], [c for c, _ in rows], _budget(calls))
    return joint_pass(router, passing, [[rows[k] for k in micro] for micro in plan], str(calls[0].session.device))


def plan_by_call(lengths: Sequence[int], owners: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Row indices per micro-batch: each call's rows together (longest first within a call), so
    a micro-batch holds few adapters in runs; each micro-batch's padded size (rows x its longest
    row) within `max_tokens` (0 = one micro-batch). A call that fits in one micro-batch is never
    split across two (a call cut in two pays the routing of two runs in both, for nothing on
    the CPU); a longer one fills micro-batches of its own, a row longer than the budget alone."""
    order = sorted(range(len(lengths)), key=lambda i: (owners[i], -lengths[i]))
    if max_tokens <= 0:
        return [order] if order else []
    calls: dict[int, list[int]] = {}
    for index in order:
        calls.setdefault(owners[index], []).append(index)
    batches: list[list[int]] = []
    for rows in calls.values():
        widest = lengths[rows[0]]
        if batches and _padded(batches[-1], lengths, extra=rows) <= max_tokens:
            batches[-1].extend(rows)
        elif len(rows) * widest <= max_tokens:
            batches.append(list(rows))
        else:
            batches.extend(_fill(rows, lengths, max_tokens))
    return batches


def _padded(batch: list[int], lengths: Sequence[int], extra: list[int]) -> int:
    return (len(batch) + len(extra)) * max(lengths[i] for i in (*batch, *extra))


def _fill(rows: list[int], lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """One call's rows (longest first) in micro-batches within the budget, a too-long row alone."""
    batches: list[list[int]] = []
    for index in rows:
        if batches and _padded(batches[-1], lengths, extra=[index]) <= max_tokens:
            batches[-1].append(index)
        else:
            batches.append([index])
    return batches


def _attached(router: AdapterRouter, session: TrainingSession) -> int:
    key = id(session.base)
    if key not in router:
        router.attach(key, session.base.updates)
    return key


def _budget(calls: Sequence[CycleCall]) -> int:
    """The smallest micro-batch budget of the calls' sessions (0 = no limit), at most
    CPU_CYCLE_TOKENS on the CPU."""
    budgets = [call.session.micro_batch_tokens for call in calls if call.session.micro_batch_tokens > 0]
    if not str(calls[0].session.device).startswith("cuda"):
        budgets.append(CPU_CYCLE_TOKENS)
    return min(budgets) if budgets else 0


def _gradients(session: TrainingSession) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in session.trainable_parameters()]


def _restore_gradients(session: TrainingSession, gradients: list[torch.Tensor | None]) -> None:
    for parameter, gradient in zip(session.trainable_parameters(), gradients):
        parameter.grad = gradient

