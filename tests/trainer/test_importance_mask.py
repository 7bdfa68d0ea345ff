"""Masked importance sampling (LossConfig.importance_mask) and truncated IS against numbers
worked out by hand: the keep masks, the loss and its gradient, the denominators a masked
token leaves, the metrics, micro-batching, and the refusals of a real ForwardBackward.

The hand batch: three sequences of four tokens (index 0 is never trained), log ratios
log r = logp - sampling_logp chosen so the ratios are e^0.1, e^-1, e^1, ...

    seq 0  mask [0 1 1 1]  log r [0  0.1  -1   1  ]  A = +1
    seq 1  mask [0 1 1 0]  log r [0  0.5  -0.5 3  ]  A = -1   (token 3 untrained)
    seq 2  mask [0 1 1 1]  log r [0  -1   -1   -0.4]  A = +2

Default band [0.5, 2]: TOKEN drops e^-1 = 0.368 and e^1 = 2.718; SEQUENCE drops seq 2, whose
geometric mean is e^((-1 - 1 - 0.4) / 3) = e^-0.8 = 0.449, and keeps seq 0 (e^0.0333).
"""

from __future__ import annotations

import math

import grpc
import pytest
import torch

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_trainer import convert, losses
from opentinker_trainer.batching import Batch, Datum, pad_batch
from opentinker_trainer.config import ImportanceMask, LossAggregation, LossConfig, LossFunction
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.training import MetricSums, batch_norm, objective
from opentinker_trainer.session_factory import create_session
from tests.trainer._servicer import call_error, create_request, fb_request, stub  # noqa: F401
from tests.trainer.helpers import rl_datums, session, spec

TOKEN, SEQUENCE, OFF = ImportanceMask.TOKEN, ImportanceMask.SEQUENCE, ImportanceMask.OFF
MEAN, SEQ_MEAN, SUM_NORM = (LossAggregation.TOKEN_MEAN, LossAggregation.SEQUENCE_MEAN,
                            LossAggregation.TOKEN_SUM_NORM)
LOGP = [[-1.0, -1.0, -2.0, -0.5], [-1.0, -0.7, -1.2, -1.0], [-1.0, -2.0, -1.5, -0.9]]
LOG_RATIO = [[0.0, 0.1, -1.0, 1.0], [0.0, 0.5, -0.5, 3.0], [0.0, -1.0, -1.0, -0.4]]
MASK = [[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0], [0.0, 1.0, 1.0, 1.0]]
ADVANTAGE = [1.0, -1.0, 2.0]
TOKEN_KEEP = [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 1]]
SEQUENCE_KEEP = [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0]]
E = math.e


def hand_datums(keep: list[list[int]] | None = None) -> list[Datum]:
    return [Datum(tokens=(1, 2, 3, 4), loss_mask=tuple(m), advantages=(a,) * 4,
                  sampling_logprobs=tuple(p - r for p, r in zip(lp, lr)),
                  importance_keep=tuple(float(k) for k in keep[i]) if keep else ())
            for i, (lp, lr, m, a) in enumerate(zip(LOGP, LOG_RATIO, MASK, ADVANTAGE))]


def hand_batch() -> Batch:
    return pad_batch(hand_datums())


def loss_config(function: LossFunction, mask: ImportanceMask = TOKEN,
                aggregation: LossAggregation = MEAN, **extra) -> LossConfig:
    clip = {} if function in (LossFunction.POLICY_GRADIENT, LossFunction.TRUNCATED_IS) else \
        {"clip_low": 0.2, "clip_high": 0.2}
    return LossConfig(function=function, aggregation=aggregation, importance_mask=mask,
                      **clip, **extra)


def run_objective(loss: LossConfig, batch: Batch | None = None,
                  norm: losses.LossNorm | None = None) -> tuple[float, torch.Tensor, dict]:
    """(objective, d objective / d logp, metrics) at LOGP, the batch computing its own norm."""
    logp = torch.tensor(LOGP, requires_grad=True)
    metrics = MetricSums()
    entropy = torch.full((3, 4), 0.5)  # a constant: counts only where entropy_coef is set
    value = objective(logp, entropy, None, batch or hand_batch(), loss, norm, metrics)
    value.backward()
    return float(value.detach()), logp.grad, metrics.means()


def close(actual: torch.Tensor, expected: list[list[float]], atol: float = 1e-5) -> bool:
    return torch.allclose(actual.float(), torch.tensor(expected), atol=atol)


# ---------------------------------------------------------------- the keep masks


@pytest.mark.parametrize(("mode", "low", "high", "expected"), [
    (TOKEN, 0.5, 2.0, TOKEN_KEEP),
    (SEQUENCE, 0.5, 2.0, SEQUENCE_KEEP),
    (TOKEN, 0.3, 3.0, [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]),  # e^-1, e^1 inside
    (SEQUENCE, 0.3, 3.0, [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]),  # e^-0.8 inside
    (TOKEN, 0.9, 1.2, [[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 0]]),  # only e^0.1 left
], ids=["token", "sequence", "token-wide", "sequence-wide", "token-narrow"])
def test_keep_masks_by_hand(mode, low, high, expected) -> None:
    batch = hand_batch()
    keep = losses.importance_keep(torch.tensor(LOGP), batch.sampling_logprobs_B_T,
                                  batch.loss_mask_B_T, mode, low, high)
    assert keep.tolist() == expected


def test_the_band_edges_are_inside() -> None:
    ratios = torch.tensor([[0.0, math.log(0.5), math.log(2.0), math.log(0.499), math.log(2.001)]])
    keep = losses.importance_keep(ratios, torch.zeros(1, 5), torch.ones(1, 5), TOKEN, 0.5, 2.0)
    assert keep.tolist() == [[1, 1, 1, 0, 0]]


# ---------------------------------------------------------------- loss and gradient by hand


def test_policy_gradient_with_a_token_mask_by_hand() -> None:
    # Kept: (0,1) (1,1) (1,2) (2,3): W = 4. loss_t = -A logp = 1.0, -0.7, -1.2, 1.8: sum 0.9.
    value, grad, metrics = run_objective(loss_config(LossFunction.POLICY_GRADIENT))
    assert value == pytest.approx(0.9 / 4, abs=1e-6)
    assert close(grad, [[0, -0.25, 0, 0], [0, 0.25, 0.25, 0], [0, 0, 0, -0.5]])
    assert metrics["is/masked_fraction"] == pytest.approx(4 / 8)  # 4 of the 8 trained tokens
    assert metrics["is/truncated_fraction"] == 0.0


def test_policy_gradient_with_a_sequence_mask_by_hand() -> None:
    # Seq 2 is dropped: W = 5. seq 0: -logp = 1, 2, 0.5; seq 1: logp = -0.7, -1.2. Sum 1.6.
    value, grad, metrics = run_objective(loss_config(LossFunction.POLICY_GRADIENT, SEQUENCE))
    assert value == pytest.approx(1.6 / 5, abs=1e-6)
    assert close(grad, [[0, -0.2, -0.2, -0.2], [0, 0.2, 0.2, 0], [0, 0, 0, 0]])
    assert metrics["is/masked_fraction"] == pytest.approx(3 / 8)


def test_a_masked_sequence_leaves_the_sequence_mean_denominator() -> None:
    # Sequence means: seq 0 3.5 / 3, seq 1 -1.9 / 2; over the 2 kept sequences, not 3.
    value, grad, _ = run_objective(loss_config(LossFunction.POLICY_GRADIENT, SEQUENCE, SEQ_MEAN))
    assert value == pytest.approx((3.5 / 3 - 1.9 / 2) / 2, abs=1e-6)
    assert close(grad, [[0, -1 / 6, -1 / 6, -1 / 6], [0, 0.25, 0.25, 0], [0, 0, 0, 0]])


def test_a_token_sum_norm_divides_by_the_kept_sequences_and_the_longest_length() -> None:
    # TOKEN mask, Dr.GRPO: sum of kept -A logp = 0.9, over token_divisor 4 x 3 kept sequences.
    value, _, _ = run_objective(loss_config(LossFunction.POLICY_GRADIENT, TOKEN, SUM_NORM))
    assert value == pytest.approx(0.9 / (4 * 3), abs=1e-6)


def test_ppo_clip_with_a_token_mask_by_hand() -> None:
    # (0,1) A=1, r=e^0.1=1.10517: -1.10517, grad -r. (1,1) A=-1, r=e^0.5=1.64872: 1.64872,
    # grad r. (1,2) A=-1, r=e^-0.5=0.60653 < 0.8: clipped at 0.8, grad 0. (2,3) A=2,
    # r=e^-0.4=0.67032: -1.34064 > -1.6, unclipped, grad -2r. Over W = 4.
    value, grad, metrics = run_objective(loss_config(LossFunction.PPO_CLIP))
    assert value == pytest.approx((-1.10517 + 1.64872 + 0.8 - 1.34064) / 4, abs=1e-5)
    assert close(grad, [[0, -0.276293, 0, 0], [0, 0.412180, 0, 0], [0, 0, 0, -0.335160]])
    # Clipped among the 8 trained tokens: (0,3) A=1 r=e (masked too) and (1,2).
    assert metrics["clip_fraction"] == pytest.approx(2 / 8)


def test_truncated_is_by_hand() -> None:
    # No mask, cap 1.5: weights min(r, 1.5) = e^0.1, e^-1, 1.5 (e^1 truncated); 1.5 (e^0.5
    # truncated), e^-0.5; e^-1, e^-1, e^-0.4. loss_t = -w A logp, over the 8 trained tokens.
    loss = loss_config(LossFunction.TRUNCATED_IS, OFF, truncation_cap=1.5)
    value, grad, metrics = run_objective(loss)
    per_token = [1.105171 * 1.0, 0.367879 * 2.0, 1.5 * 0.5,
                 -1.5 * 0.7, -0.606531 * 1.2,
                 0.367879 * 2 * 2.0, 0.367879 * 2 * 1.5, 0.670320 * 2 * 0.9]
    assert value == pytest.approx(sum(per_token) / 8, abs=1e-5)
    assert close(grad, [[0, -1.105171 / 8, -0.367879 / 8, -1.5 / 8],
                        [0, 1.5 / 8, 0.606531 / 8, 0],
                        [0, -0.735759 / 8, -0.735759 / 8, -1.340640 / 8]])
    assert metrics["is/truncated_fraction"] == pytest.approx(2 / 8)  # e^1 and e^0.5
    assert metrics["is/masked_fraction"] == 0.0


def test_truncated_is_with_a_token_mask_by_hand() -> None:
    # Kept (0,1) w=e^0.1, (1,1) w=min(e^0.5, 1.5)=1.5, (1,2) w=e^-0.5, (2,3) w=e^-0.4; W = 4.
    loss = loss_config(LossFunction.TRUNCATED_IS, TOKEN, truncation_cap=1.5)
    value, grad, metrics = run_objective(loss)
    assert value == pytest.approx((1.105171 - 1.05 - 0.727837 + 1.206576) / 4, abs=1e-5)
    assert close(grad, [[0, -0.276293, 0, 0], [0, 0.375, 0.151633, 0], [0, 0, 0, -0.335160]])
    # Over the 8 trained tokens: 4 masked; ratios above 1.5 are e^1 (masked too) and e^0.5.
    assert metrics["is/masked_fraction"] == pytest.approx(0.5)
    assert metrics["is/truncated_fraction"] == pytest.approx(0.25)
    ratios = [E ** 0.1, E ** -1, E, E ** 0.5, E ** -0.5, E ** -1, E ** -1, E ** -0.4]
    assert metrics["ratio/mean"] == pytest.approx(sum(ratios) / 8, rel=1e-5)
    assert metrics["ratio/max"] == pytest.approx(E, rel=1e-5)


POLICY_LOSSES = [LossFunction.POLICY_GRADIENT, LossFunction.PPO_CLIP, LossFunction.DUAL_CLIP,
                 LossFunction.TRUNCATED_IS, LossFunction.GSPO]


@pytest.mark.parametrize("aggregation", [MEAN, SEQ_MEAN, SUM_NORM])
@pytest.mark.parametrize("function", POLICY_LOSSES)
@pytest.mark.parametrize(("mode", "keep"), [(TOKEN, TOKEN_KEEP), (SEQUENCE, SEQUENCE_KEEP)],
                         ids=["token", "sequence"])
def test_a_masked_token_counts_as_if_its_loss_mask_were_zero(function, aggregation, mode, keep) -> None:
    """Every policy loss and aggregation: masking equals zeroing those tokens' loss mask, with
    the mask computed in the micro-batch or carried by the datums (the pre-pass's way)."""
    zeroed = [Datum(tokens=d.tokens, loss_mask=tuple(m * k for m, k in zip(d.loss_mask, row)),
                    advantages=d.advantages, sampling_logprobs=d.sampling_logprobs)
              for d, row in zip(hand_datums(), keep)]
    masked = loss_config(function, mode, aggregation, entropy_coef=0.1)
    plain = loss_config(function, OFF, aggregation, entropy_coef=0.1)
    expected_value, expected_grad, _ = run_objective(plain, pad_batch(zeroed), batch_norm(zeroed, plain))
    in_batch_value, in_batch_grad, _ = run_objective(masked)
    carried = hand_datums(keep)
    carried_value, carried_grad, _ = run_objective(masked, pad_batch(carried), batch_norm(carried, masked))
    assert batch_norm(carried, masked) == batch_norm(zeroed, plain)
    for value, grad in ((in_batch_value, in_batch_grad), (carried_value, carried_grad)):
        assert value == pytest.approx(expected_value, abs=1e-6)
        assert torch.allclose(grad, expected_grad, atol=1e-6)
    assert expected_grad.abs().sum() > 0


def test_metrics_without_the_mask() -> None:
    _, _, metrics = run_objective(loss_config(LossFunction.PPO_CLIP, OFF))
    assert metrics["is/masked_fraction"] == 0.0 and metrics["is/truncated_fraction"] == 0.0
    assert metrics["ratio/max"] == pytest.approx(E, rel=1e-5)  # e^3 is on an untrained token
    _, _, pg = run_objective(loss_config(LossFunction.POLICY_GRADIENT, OFF))
    assert pg["ratio/max"] == pytest.approx(E, rel=1e-5) and "clip_fraction" not in pg


def test_micro_batch_maxima_merge() -> None:
    first, second = MetricSums(), MetricSums()
    first.add_max("ratio/max", torch.tensor([[3.0, 9.0]]), torch.tensor([[1.0, 0.0]]))
    second.add_max("ratio/max", torch.tensor([[2.0]]), torch.tensor([[1.0]]))
    second.add_max("ratio/max", torch.tensor([[7.0]]), torch.tensor([[0.0]]))  # nothing trained
    first.merge(second)
    assert first.means() == {"ratio/max": 3.0}


# ---------------------------------------------------------------- a real model, micro-batched


PATTERN = [0.1, -1.0, 1.0, 0.5, -0.5, -0.4]
SHIFTS = [0.0, -0.9, 0.8, 0.0, 0.15]  # no log ratio within 0.02 of the band's edges, +-0.693


def log_ratios(datums: list[Datum]) -> list[list[float]]:
    """Datum i's log ratio at token t: PATTERN[t % 6] + SHIFTS[i]. With the default band,
    TOKEN drops 2, 4, 3, 2 and 1 of each 6 tokens; SEQUENCE drops datums 1 (geometric mean
    e^-0.86) and 2 (e^0.83) and keeps the others (e^-0.05, e^0.08, e^0.30)."""
    return [[PATTERN[t % 6] + SHIFTS[i] for t in range(len(d.tokens))] for i, d in enumerate(datums)]


def shifted(datums: list[Datum], current: list[list[float]]) -> list[Datum]:
    """Each datum's sampling logprobs: the current ones minus its `log_ratios`."""
    return [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages,
                  sampling_logprobs=tuple(lp - r for lp, r in zip(row, ratios)))
            for d, row, ratios in zip(datums, current, log_ratios(datums))]


@pytest.mark.parametrize("mode", [TOKEN, SEQUENCE])
def test_micro_batches_give_the_gradient_of_one_batch(mode) -> None:
    whole, split, zeroed = session(), session(max_tokens=28), session()
    base = rl_datums(count=5, length=14)
    datums = shifted(base, whole.compute_logprobs([d.tokens for d in base], reference=False,
                                                  temperature=1.0))
    loss = loss_config(LossFunction.PPO_CLIP, mode, SEQ_MEAN, entropy_coef=0.01)
    result_whole = whole.forward_backward(datums, loss)
    result_split = split.forward_backward(datums, loss)
    assert result_split.loss == pytest.approx(result_whole.loss, rel=1e-5)
    for (name, a), b in zip(whole.model.named_parameters(), split.model.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name
    assert result_split.metrics == pytest.approx(result_whole.metrics, rel=1e-5)
    masked = result_whole.metrics["is/masked_fraction"]
    assert 0.2 < masked < 0.8
    # The same as training without the mask on datums whose masked tokens have loss mask 0.
    keep = _keep_of(datums, loss)
    plain = [Datum(tokens=d.tokens, loss_mask=tuple(m * k for m, k in zip(d.loss_mask, row)),
                   advantages=d.advantages, sampling_logprobs=d.sampling_logprobs)
             for d, row in zip(datums, keep)]
    result_zeroed = zeroed.forward_backward(plain, loss_config(LossFunction.PPO_CLIP, OFF, SEQ_MEAN,
                                                               entropy_coef=0.01))
    assert result_zeroed.loss == pytest.approx(result_whole.loss, rel=1e-5)
    for a, b in zip(whole.model.parameters(), zeroed.model.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)


@pytest.mark.timeout(240)
def test_two_ranks_mask_like_one_process(tmp_path) -> None:
    """Data-parallel: rank 0's pre-pass masks, both ranks divide by the masked batch's norm."""
    single = create_session("one", spec(seed=3), checkpoint_root=tmp_path)
    parallel = create_session("two", spec(seed=3), checkpoint_root=tmp_path, device_ids=("cpu:0", "cpu:1"))
    try:
        base = rl_datums(count=5, length=14)
        datums = shifted(base, single.compute_logprobs([d.tokens for d in base], reference=False,
                                                       temperature=1.0))
        loss = loss_config(LossFunction.GSPO, TOKEN, SEQ_MEAN)
        one, two = single.forward_backward(datums, loss), parallel.forward_backward(datums, loss)
        assert two.loss == pytest.approx(one.loss, rel=1e-5) and one.loss != 0
        assert two.metrics == pytest.approx(one.metrics, rel=1e-4, abs=1e-6)
        assert 0.2 < one.metrics["is/masked_fraction"] < 0.8
        assert parallel.optim_step().grad_norm == pytest.approx(single.optim_step().grad_norm, rel=1e-4)
    finally:
        parallel.close()


def _keep_of(datums: list[Datum], loss: LossConfig) -> list[list[float]]:
    """The keep masks from the datums' known `log_ratios`."""
    rows = []
    for d, ratios in zip(datums, log_ratios(datums)):
        log_ratio = torch.tensor([ratios])
        mask = torch.tensor([d.loss_mask])
        mask[0, 0] = 0.0
        rows.append(losses.importance_keep(log_ratio, torch.zeros_like(log_ratio), mask,
                                           loss.importance_mask, 0.5, 2.0)[0].tolist())
    return rows


def test_forward_backward_metrics_of_a_truncated_is_step() -> None:
    s = session()
    base = rl_datums(count=2, length=14)
    datums = shifted(base, s.compute_logprobs([d.tokens for d in base], reference=False,
                                              temperature=1.0))
    metrics = s.forward_backward(datums, loss_config(LossFunction.TRUNCATED_IS, TOKEN,
                                                     truncation_cap=1.5)).metrics
    ratios = [E ** r for row in log_ratios(datums) for r in row[2:]]  # loss mask (0, 0, 1, ...)
    assert metrics["ratio/mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-4)
    assert metrics["ratio/max"] == pytest.approx(E, rel=1e-4)
    assert metrics["is/masked_fraction"] == pytest.approx(
        sum(r < 0.5 or r > 2 for r in ratios) / len(ratios))
    assert metrics["is/truncated_fraction"] == pytest.approx(sum(r > 1.5 for r in ratios) / len(ratios))


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(("kwargs", "field", "words"), [
    ({"function": LossFunction.CROSS_ENTROPY}, "loss.importance_mask", "CROSS_ENTROPY"),
    ({"importance_mask_low": -0.5}, "loss.importance_mask_low", "(0, 1]"),
    ({"importance_mask_low": 0.0}, "loss.importance_mask_low", "(0, 1]"),
    ({"importance_mask_low": 1.5, "importance_mask_high": 3.0}, "loss.importance_mask_low", "(0, 1]"),
    ({"importance_mask_high": 0.9}, "loss.importance_mask_high", ">= 1"),
    ({"importance_mask_high": math.inf}, "loss.importance_mask_high", "finite"),
    ({"importance_mask_low": math.nan}, "loss.importance_mask_low", "finite"),
    ({"importance_mask_low": 1.0, "importance_mask_high": 1.0}, "loss.importance_mask_high",
     "> importance_mask_low"),
])
def test_bad_importance_masks_are_refused(kwargs, field, words) -> None:
    arguments = {"function": LossFunction.PPO_CLIP, "clip_low": 0.2, "clip_high": 0.2,
                 "importance_mask": TOKEN, **kwargs}
    with pytest.raises(ValidationError) as raised:
        LossConfig(**arguments)
    assert raised.value.field == field and words in str(raised.value)


def test_the_band_defaults_and_is_ignored_when_the_mask_is_off() -> None:
    on = convert.loss_config(algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_POLICY_GRADIENT,
                                                importance_mask=algo_pb.IMPORTANCE_MASK_SEQUENCE))
    assert (on.importance_mask, on.importance_mask_low, on.importance_mask_high) == (SEQUENCE, 0.5, 2.0)
    off = LossConfig(function=LossFunction.CROSS_ENTROPY, importance_mask_low=5.0)
    assert not off.masks_importance


PG = algo_pb.LOSS_FUNCTION_POLICY_GRADIENT
MASKED = dict(importance_mask=algo_pb.IMPORTANCE_MASK_TOKEN)
REFUSED = {
    "cross-entropy": (algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_CROSS_ENTROPY, **MASKED),
                      "loss.importance_mask: masks a policy-gradient loss"),
    "negative low": (algo_pb.LossConfig(function=PG, importance_mask_low=-0.1, **MASKED),
                     "loss.importance_mask_low: must be in (0, 1]"),
    "low above 1": (algo_pb.LossConfig(function=PG, importance_mask_low=1.5, importance_mask_high=4,
                                       **MASKED), "loss.importance_mask_low: must be in (0, 1]"),
    "high below 1": (algo_pb.LossConfig(function=PG, importance_mask_high=0.8, **MASKED),
                     "loss.importance_mask_high: must be >= 1"),
    "empty band": (algo_pb.LossConfig(function=PG, importance_mask_low=1, importance_mask_high=1,
                                      **MASKED), "loss.importance_mask_high: must be > importance_mask_low"),
    "nan high": (algo_pb.LossConfig(function=PG, importance_mask_high=math.nan, **MASKED),
                 "loss.importance_mask_high: must be a finite number"),
    "unknown mode": (algo_pb.LossConfig(function=PG, importance_mask=7),
                     "loss.importance_mask: 7 is not accepted"),
}


@pytest.fixture(scope="module")
def masked_sid(stub) -> str:  # noqa: F811 - the servicer tests' module fixture
    return stub.CreateSession(create_request("job-mask")).session.session_id


@pytest.mark.parametrize("case", list(REFUSED))
def test_forward_backward_refuses_a_bad_importance_mask(stub, masked_sid, case) -> None:  # noqa: F811
    loss, words = REFUSED[case]
    error = call_error(stub.ForwardBackward, fb_request(masked_sid, rl_datums(), loss, job="job-mask"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details(), error.details()


def test_forward_backward_with_a_mask_needs_sampling_logprobs_and_reports_its_metrics(
        stub, masked_sid) -> None:  # noqa: F811
    loss = algo_pb.LossConfig(function=PG, **MASKED)
    bare = [Datum(tokens=d.tokens, loss_mask=d.loss_mask, advantages=d.advantages) for d in rl_datums()]
    error = call_error(stub.ForwardBackward, fb_request(masked_sid, bare, loss, job="job-mask"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "datums[0].sampling_logprobs" in error.details() and "importance_mask" in error.details()
    stale = rl_datums(old_shift=-3.0)  # sampling logprobs -8.5: every ratio near e^3, all masked
    response = stub.ForwardBackward(fb_request(masked_sid, stale, loss, job="job-mask"))
    assert response.metrics["is/masked_fraction"] == 1.0 and response.loss == 0.0
    assert response.metrics["ratio/max"] > 2.0 and response.metrics["is/truncated_fraction"] == 0.0
