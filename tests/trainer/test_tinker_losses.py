"""Tinker's built-in RL losses (importance_sampling, cispo, dro), the SUM reduction and
OptimStepRequest.adam, each against a plain-torch reference of Tinker's formula: the loss
value and the gradient, on tensors and on a tiny model; SUM adding up over micro-batches,
ForwardBackward calls and replicas; the Adam values reaching the update and the checkpoint."""

from __future__ import annotations

import dataclasses
import math

import grpc
import pytest
import torch

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_runtime.ml.checkpoints import CheckpointFormat
from opentinker_trainer import convert, losses
from opentinker_trainer.batching import Datum
from opentinker_trainer.checkpointing import load_checkpoint, save_checkpoint
from opentinker_trainer.config import AdamStep, LossAggregation, LossConfig, LossFunction
from opentinker_trainer.errors import ValidationError
from opentinker_trainer.session_factory import create_session
from tests.trainer.helpers import rl_datums, same, session, spec, weights

SUM = LossAggregation.SUM
IS = LossConfig(function=LossFunction.IMPORTANCE_SAMPLING, aggregation=SUM)
CISPO = LossConfig(function=LossFunction.CISPO, aggregation=SUM, clip_low=0.2, clip_high=0.1)
DRO = LossConfig(function=LossFunction.DRO, aggregation=SUM, dro_beta=0.3)
PPO = LossConfig(function=LossFunction.PPO_CLIP, aggregation=SUM, clip_low=0.2, clip_high=0.1)
TINKER_LOSSES = {"importance_sampling": IS, "cispo": CISPO, "dro": DRO, "ppo": PPO}
ADAM = AdamStep(learning_rate=3e-3, beta1=0.5, beta2=0.7, epsilon=1e-3, weight_decay=0.1,
                max_grad_norm=0.5)


# ---------------------------------------------------------------- Tinker's formulas, verbatim


def tinker_loss(config: LossConfig, target_logprobs, sampling_logprobs, advantages):
    """Tinker's per-token objective (its docs' code), before its `.sum()`; thresholds from our
    clip_low / clip_high as the gateway converts them."""
    low, high = 1 - config.clip_low, 1 + config.clip_high
    prob_ratio = torch.exp(target_logprobs - sampling_logprobs)
    if config.function == LossFunction.IMPORTANCE_SAMPLING:
        return -(prob_ratio * advantages)
    if config.function == LossFunction.CISPO:
        clipped_ratio = torch.clamp(prob_ratio, low, high)
        return -(clipped_ratio.detach() * target_logprobs * advantages)
    if config.function == LossFunction.DRO:
        quadratic_term = (target_logprobs - sampling_logprobs) ** 2
        return -(target_logprobs * advantages - 0.5 * config.dro_beta * quadratic_term)
    clipped_ratio = torch.clamp(prob_ratio, low, high)
    return -torch.min(prob_ratio * advantages, clipped_ratio * advantages)


def our_loss(config: LossConfig, logp, old, advantages) -> torch.Tensor:
    match config.function:
        case LossFunction.IMPORTANCE_SAMPLING:
            return losses.importance_sampling(logp, old, advantages).loss_B_T
        case LossFunction.CISPO:
            return losses.cispo(logp, old, advantages, config.clip_low, config.clip_high).loss_B_T
        case LossFunction.DRO:
            return losses.dro(logp, old, advantages, config.dro_beta).loss_B_T
    return losses.ppo_clip(logp, old, advantages, config.clip_low, config.clip_high).loss_B_T


def random_tokens(seed: int = 0):
    """(logp, sampling logp, advantages, mask) of 3 x 6 tokens; ratios in [e^-1, e]."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(3, 6, generator=g, dtype=torch.float64) * 3
    old = logp + (torch.rand(3, 6, generator=g, dtype=torch.float64) * 2 - 1)
    advantages = torch.randn(3, 6, generator=g, dtype=torch.float64)
    mask = (torch.rand(3, 6, generator=g) > 0.3).double()
    return logp, old, advantages, mask


@pytest.mark.parametrize("name", TINKER_LOSSES)
def test_loss_and_gradient_match_tinkers_formula(name) -> None:
    config = TINKER_LOSSES[name]
    logp, old, advantages, mask = random_tokens()
    ours_logp, theirs_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    ours = losses.aggregate(our_loss(config, ours_logp, old, advantages), mask, SUM,
                            losses.LossNorm(total_weight=1.0, num_sequences=1, token_divisor=1.0))
    theirs = (tinker_loss(config, theirs_logp, old, advantages) * mask).sum()
    ours.backward()
    theirs.backward()
    assert float(ours) == pytest.approx(float(theirs), rel=1e-12)
    assert torch.allclose(ours_logp.grad, theirs_logp.grad, rtol=1e-12, atol=1e-15)
    assert ours_logp.grad.abs().sum() > 0  # the comparison is not of two zeros


def test_importance_sampling_gradient_is_ratio_times_advantage() -> None:
    """r is not detached: d(-r A)/d logp = -r A (a detached r would give 0)."""
    logp, old, advantages, _ = random_tokens(1)
    logp.requires_grad_(True)
    losses.importance_sampling(logp, old, advantages).loss_B_T.sum().backward()
    assert torch.allclose(logp.grad, -torch.exp(logp - old).detach() * advantages)


def test_cispo_gradient_uses_the_clipped_ratio_and_never_vanishes() -> None:
    logp = torch.tensor([[math.log(0.5), math.log(0.9), math.log(0.3)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5), math.log(0.6), math.log(0.6)]])  # r = 1, 1.5, 0.5
    advantages = torch.tensor([[1.0, 2.0, -1.0]])
    result = losses.cispo(logp, old, advantages, clip_low=0.2, clip_high=0.1)
    result.loss_B_T.sum().backward()
    assert torch.allclose(logp.grad, -torch.tensor([[1.0, 1.1, 0.8]]) * advantages)
    assert result.clipped_B_T.tolist() == [[False, True, True]]


def test_cispo_clip_low_of_one_is_tinkers_default_no_lower_bound() -> None:
    """Tinker's default clip_low_threshold 0 = clip_low 1: a ratio of 0.1 keeps its weight."""
    logp = torch.tensor([[math.log(0.06)]], requires_grad=True)
    old = torch.tensor([[math.log(0.6)]])
    losses.cispo(logp, old, torch.ones(1, 1), clip_low=1.0, clip_high=3.0).loss_B_T.sum().backward()
    assert logp.grad.item() == pytest.approx(-0.1, rel=1e-5)


def test_dro_gradient_is_advantage_minus_beta_times_log_ratio() -> None:
    logp, old, advantages, _ = random_tokens(2)
    logp.requires_grad_(True)
    losses.dro(logp, old, advantages, beta=0.3).loss_B_T.sum().backward()
    assert torch.allclose(logp.grad, -(advantages - 0.3 * (logp - old)).detach())


# ---------------------------------------------------------------- on a tiny model


def noisy_datums(s, count: int = 4, length: int = 14, seed: int = 0) -> list[Datum]:
    """RL datums whose sampling logprobs are the policy's own +-1 (ratios in [e^-1, e]), with
    mixed-sign advantages that are 0 on the prompt (as Tinker's are)."""
    g = torch.Generator().manual_seed(seed)
    datums = []
    for datum in rl_datums(count=count, length=length, seed=seed):
        current = s.compute_logprobs([datum.tokens], reference=False, temperature=1.0)[0]
        noise = (torch.rand(len(current), generator=g) * 2 - 1).tolist()
        advantages = [0.0, 0.0, *torch.randn(len(current) - 2, generator=g).tolist()]
        datums.append(dataclasses.replace(
            datum, advantages=tuple(advantages),
            sampling_logprobs=tuple(c + n for c, n in zip(current, noise))))
    return datums


def reference_gradients(s, datums: list[Datum], config: LossConfig):
    """Tinker's loss over `datums`, by hand on s.model: (value, gradient per parameter)."""
    s.model.train()
    s.model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for datum in datums:
        tokens = torch.tensor([datum.tokens])
        logits = s.model(input_ids=tokens).logits.float()
        target_logprobs = torch.log_softmax(logits[0, :-1], -1).gather(
            -1, tokens[0, 1:, None])[:, 0]  # predicts tokens[1:]
        per_token = tinker_loss(config, target_logprobs, torch.tensor(datum.sampling_logprobs[1:]),
                                torch.tensor(datum.advantages[1:]))
        total = total + (per_token * torch.tensor(datum.loss_mask[1:])).sum()
    total.backward()
    grads = {n: p.grad.clone() for n, p in s.model.named_parameters() if p.grad is not None}
    s.model.zero_grad(set_to_none=True)
    return float(total), grads


def gradients(s) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in s.model.named_parameters() if p.grad is not None}


def assert_grads_close(ours, theirs, rtol=1e-4, atol=1e-6) -> None:
    assert ours.keys() == theirs.keys() and ours
    for name in ours:
        assert torch.allclose(ours[name], theirs[name], rtol=rtol, atol=atol), name
    assert max(g.abs().max().item() for g in ours.values()) > 1e-4  # not all zeros


@pytest.mark.parametrize("name", TINKER_LOSSES)
def test_forward_backward_matches_tinkers_loss_on_a_model(tmp_path, name) -> None:
    config = TINKER_LOSSES[name]
    s = session(tmp_path)
    datums = noisy_datums(s)
    value, expected = reference_gradients(s, datums, config)
    result = s.forward_backward(datums, config)
    assert result.loss == pytest.approx(value, rel=1e-4)
    assert_grads_close(gradients(s), expected)


def test_sum_is_the_same_over_micro_batch_budgets_and_split_calls(tmp_path) -> None:
    whole = session(tmp_path)
    datums = noisy_datums(whole, count=5)
    one_call = whole.forward_backward(datums, CISPO)
    small = session(tmp_path, max_tokens=16)  # one datum per micro-batch
    small_call = small.forward_backward(datums, CISPO)
    split = session(tmp_path)
    first, second = split.forward_backward(datums[:2], CISPO), split.forward_backward(datums[2:], CISPO)
    assert small_call.loss == pytest.approx(one_call.loss, rel=1e-5)
    assert first.loss + second.loss == pytest.approx(one_call.loss, rel=1e-5)
    assert_grads_close(gradients(small), gradients(whole))
    assert_grads_close(gradients(split), gradients(whole))
    # A mean would halve when the batch doubles; the sum doubles.
    doubled = session(tmp_path).forward_backward(datums + datums, CISPO)
    assert doubled.loss == pytest.approx(2 * one_call.loss, rel=1e-5)


@pytest.mark.timeout(240)
def test_sum_over_two_replicas_equals_one_process(tmp_path) -> None:
    single = create_session("one", spec(seed=3), checkpoint_root=tmp_path)
    datums = noisy_datums(single, count=5)
    parallel = create_session("two", spec(seed=3), checkpoint_root=tmp_path,
                              device_ids=("cpu:0", "cpu:1"))
    try:
        ours, theirs = parallel.forward_backward(datums, DRO), single.forward_backward(datums, DRO)
        assert ours.loss == pytest.approx(theirs.loss, rel=1e-5)
        assert parallel.optim_step().grad_norm == pytest.approx(single.optim_step().grad_norm, rel=1e-4)
    finally:
        parallel.close()


# ---------------------------------------------------------------- loss config validation


@pytest.mark.parametrize(("arguments", "field", "words"), [
    ({"function": LossFunction.DRO}, "loss.dro_beta", "must be > 0"),
    ({"function": LossFunction.DRO, "dro_beta": -1.0}, "loss.dro_beta", "must be > 0"),
    ({"function": LossFunction.CISPO, "clip_low": 1.5}, "loss.clip_low", "[0, 1]"),
    ({"function": LossFunction.CISPO, "clip_high": -0.1}, "loss.clip_high", ">= 0"),
    ({"function": LossFunction.DRO, "dro_beta": math.inf}, "loss.dro_beta", "finite"),
])
def test_bad_tinker_loss_parameters_name_the_field(arguments, field, words) -> None:
    with pytest.raises(ValidationError) as raised:
        LossConfig(**arguments)
    assert raised.value.field == field and words in str(raised.value)


def test_proto_values_map_to_the_tinker_losses() -> None:
    message = algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_CISPO, clip_low=0.0, clip_high=3.0,
                                 aggregation=algo_pb.LOSS_AGGREGATION_SUM)
    cispo = convert.loss_config(message)
    assert (cispo.function, cispo.aggregation, cispo.clip_low, cispo.clip_high) == \
        (LossFunction.CISPO, SUM, 0.0, 3.0)
    dro = convert.loss_config(algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_DRO, dro_beta=0.25))
    assert (dro.function, dro.dro_beta) == (LossFunction.DRO, 0.25)
    assert convert.loss_config(algo_pb.LossConfig(
        function=algo_pb.LOSS_FUNCTION_IMPORTANCE_SAMPLING)).function == LossFunction.IMPORTANCE_SAMPLING
    assert all(LossConfig(function=f, dro_beta=1.0).uses_ratio for f in
               (LossFunction.IMPORTANCE_SAMPLING, LossFunction.CISPO, LossFunction.DRO))


# ---------------------------------------------------------------- OptimStepRequest.adam


def test_zero_learning_rate_leaves_the_weights_unchanged(tmp_path) -> None:
    s = session(tmp_path)
    before = weights(s)
    s.forward_backward(noisy_datums(s), IS)
    result = s.optim_step(adam=dataclasses.replace(ADAM, learning_rate=0.0))
    assert result.step == 1 and result.learning_rate == 0.0 and result.grad_norm > 0
    assert same(weights(s), before)


def test_adam_values_reach_the_optimizer_and_the_update(tmp_path) -> None:
    """One step equals torch's AdamW with ADAM's values on the clipped gradient (the session's
    own config has lr 1e-2, betas 0.9/0.999, eps 1e-8, no weight decay, clip 1.0)."""
    s = session(tmp_path)
    s.forward_backward(noisy_datums(s), DRO)
    names = [n for n, p in s.model.named_parameters() if p.requires_grad]
    copies = [p.detach().clone().requires_grad_(True) for p in s.trainable_parameters()]
    for copy, parameter in zip(copies, s.trainable_parameters()):
        copy.grad = parameter.grad.clone()
    norm = torch.nn.utils.clip_grad_norm_(copies, ADAM.max_grad_norm)
    reference = torch.optim.AdamW(copies, lr=ADAM.learning_rate, betas=(ADAM.beta1, ADAM.beta2),
                                  eps=ADAM.epsilon, weight_decay=ADAM.weight_decay)
    reference.step()
    result = s.optim_step(adam=ADAM)
    group = s.optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == \
        (ADAM.learning_rate, (ADAM.beta1, ADAM.beta2), ADAM.epsilon, ADAM.weight_decay)
    assert result.learning_rate == ADAM.learning_rate
    assert result.grad_norm == pytest.approx(float(norm), rel=1e-6) and float(norm) > ADAM.max_grad_norm
    trained = dict(s.model.named_parameters())
    for name, copy in zip(names, copies):
        assert torch.allclose(trained[name], copy, rtol=1e-5, atol=1e-7), name


def test_adam_values_stay_for_later_steps_and_a_one_off_rate(tmp_path) -> None:
    s = session(tmp_path)
    s.forward_backward(noisy_datums(s), IS)
    s.optim_step(adam=ADAM)
    s.forward_backward(noisy_datums(s, seed=1), IS)
    assert s.optim_step().learning_rate == ADAM.learning_rate  # not the config's 1e-2
    assert s.optimizer.param_groups[0]["betas"] == (ADAM.beta1, ADAM.beta2)
    s.forward_backward(noisy_datums(s, seed=2), IS)
    assert s.optim_step(learning_rate=0.5).learning_rate == 0.5
    assert s.step_hyperparameters() == ADAM


def test_adam_and_learning_rate_together_are_refused(tmp_path) -> None:
    s = session(tmp_path)
    s.forward_backward(noisy_datums(s), IS)
    with pytest.raises(ValidationError, match="learning_rate: set either"):
        s.optim_step(learning_rate=0.1, adam=ADAM)
    assert s.step == 0 and s.adam_override is None


@pytest.mark.parametrize(("field", "value", "words"), [
    ("learning_rate", -1e-4, "must be >= 0"), ("beta1", 1.0, "[0, 1)"), ("beta2", -0.1, "[0, 1)"),
    ("epsilon", 0.0, "must be > 0"), ("weight_decay", -0.01, "must be >= 0"),
    ("max_grad_norm", -1.0, "must be >= 0"), ("learning_rate", math.nan, "finite"),
])
def test_bad_adam_values_name_the_field(field, value, words) -> None:
    message = algo_pb.AdamStepParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, epsilon=1e-12)
    setattr(message, field, value)
    with pytest.raises(ValidationError) as raised:
        convert.adam_step(message)
    assert raised.value.field == f"adam.{field}" and words in str(raised.value)


def test_tinkers_default_adam_params_are_accepted_as_given() -> None:
    """Tinker's defaults (lr 1e-4, betas 0.9 / 0.95, eps 1e-12, no decay, no clipping): zeros
    stay zeros (no OptimizerConfig-style defaults), values are the message's float32s."""
    adam = convert.adam_step(algo_pb.AdamStepParams(learning_rate=1e-4, beta1=0.9, beta2=0.95,
                                                    epsilon=1e-12))
    expected = (1e-4, 0.9, 0.95, 1e-12, 0.0, 0.0)
    assert dataclasses.astuple(adam) == pytest.approx(expected, rel=1e-6)


def train_steps(s, steps: int, seed: int) -> list[float]:
    values = []
    for index in range(steps):
        values.append(s.forward_backward(rl_datums(seed=seed + index), IS).loss)
        s.optim_step()
    return values


def test_training_state_resumes_with_the_last_adam_values(tmp_path) -> None:
    s = session(tmp_path, job_id="job-adam")
    s.forward_backward(rl_datums(seed=0), IS)
    s.optim_step(adam=ADAM)
    record = save_checkpoint(s, tmp_path, format=CheckpointFormat.TRAINING_STATE)
    after_save = train_steps(s, 3, seed=10)
    fresh = create_session("fresh", spec(job_id="job-adam"), checkpoint_root=tmp_path)
    assert fresh.adam_override is None
    load_checkpoint(fresh, tmp_path, record.checkpoint_id)
    assert fresh.adam_override == s.adam_override == ADAM
    assert train_steps(fresh, 3, seed=10) == pytest.approx(after_save, rel=1e-6)
    # A checkpoint written before any adam puts the session back on its own config.
    plain = session(tmp_path, job_id="job-plain")
    plain.forward_backward(rl_datums(), IS)
    plain.optim_step()
    load_checkpoint(fresh, tmp_path, save_checkpoint(plain, tmp_path,
                                                     format=CheckpointFormat.TRAINING_STATE).checkpoint_id)
    assert fresh.adam_override is None


# ---------------------------------------------------------------- through the gRPC servicer

from opentinker_api.common.v1 import datum_pb2  # noqa: E402
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb  # noqa: E402
from tests.trainer._servicer import (call_error, create_request, fb_request, lease,  # noqa: E402,F401
                                     logprob_rows, stub)

TINKER_ADAM = algo_pb.AdamStepParams(learning_rate=1e-4, beta1=0.9, beta2=0.95, epsilon=1e-12)
IS_SUM = algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_IMPORTANCE_SAMPLING,
                            aggregation=algo_pb.LOSS_AGGREGATION_SUM)


def policy_rows(stub, sid: str) -> list[list[float]]:
    sequences = [datum_pb2.TokenSequence(tokens=d.tokens) for d in rl_datums()]
    return logprob_rows(stub.ComputeLogprobs(pb.ComputeLogprobsRequest(session_id=sid,
                                                                       sequences=sequences)))


def test_a_sum_reduced_loss_over_grpc_is_tinkers_loss_sum(stub) -> None:
    sid = stub.CreateSession(create_request("job-tinker-is")).session.session_id
    datums = [dataclasses.replace(d, advantages=(1.0,) * len(d.tokens)) for d in rl_datums(old_shift=0.3)]
    fb = stub.ForwardBackward(fb_request(sid, datums, IS_SUM, job="job-tinker-is"))
    expected = sum(-math.exp(logp - old) * advantage * weight
                   for datum, row in zip(datums, logprob_rows(fb))
                   for logp, old, advantage, weight in zip(row, datum.sampling_logprobs,
                                                           datum.advantages, datum.loss_mask))
    assert fb.loss == pytest.approx(expected, rel=1e-5) and expected < -10  # a sum, not a mean


def test_optim_step_adam_over_grpc_applies_once_and_lr_zero_moves_nothing(stub) -> None:
    job = "job-tinker-adam"
    sid = stub.CreateSession(create_request(job)).session.session_id
    before = policy_rows(stub, sid)
    stub.ForwardBackward(fb_request(sid, rl_datums(), IS_SUM, job=job))
    frozen = algo_pb.AdamStepParams()
    frozen.CopyFrom(TINKER_ADAM)
    frozen.learning_rate = 0.0
    request = pb.OptimStepRequest(session_id=sid, lease=lease(job=job), request_id="adam-1", adam=frozen)
    step = stub.OptimStep(request)
    assert (step.step, step.learning_rate) == (1, 0.0) and step.grad_norm > 0
    assert stub.OptimStep(request) == step  # a retry applies nothing more
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).session.step == 1
    assert policy_rows(stub, sid) == before
    stub.ForwardBackward(fb_request(sid, rl_datums(), IS_SUM, job=job))
    moved = stub.OptimStep(pb.OptimStepRequest(session_id=sid, lease=lease(job=job), adam=TINKER_ADAM))
    assert moved.learning_rate == pytest.approx(1e-4) and policy_rows(stub, sid) != before


@pytest.mark.parametrize(("method", "make", "words"), [
    ("OptimStep", lambda sid, job: pb.OptimStepRequest(
        session_id=sid, lease=lease(job=job), adam=algo_pb.AdamStepParams(
            learning_rate=1e-4, beta1=1.0, beta2=0.95, epsilon=1e-12)), "adam.beta1: must be in [0, 1)"),
    ("OptimStep", lambda sid, job: pb.OptimStepRequest(
        session_id=sid, lease=lease(job=job), adam=algo_pb.AdamStepParams(learning_rate=1e-4)),
     "adam.epsilon: must be > 0"),
    ("OptimStep", lambda sid, job: pb.OptimStepRequest(
        session_id=sid, lease=lease(job=job), adam=TINKER_ADAM, learning_rate=0.1),
     "learning_rate: set either learning_rate or adam"),
    ("ForwardBackward", lambda sid, job: fb_request(sid, rl_datums(), algo_pb.LossConfig(
        function=algo_pb.LOSS_FUNCTION_DRO), job=job), "loss.dro_beta: must be > 0"),
    ("ForwardBackward", lambda sid, job: fb_request(sid, rl_datums(), algo_pb.LossConfig(
        function=algo_pb.LOSS_FUNCTION_CISPO, clip_low=2.0), job=job), "loss.clip_low: must be in [0, 1]"),
])
def test_bad_tinker_requests_are_invalid_argument_naming_the_field(stub, method, make, words) -> None:
    job = "job-tinker-bad"
    sid = stub.CreateSession(create_request(job, request_id="tinker-bad")).session.session_id
    stub.ForwardBackward(fb_request(sid, rl_datums(), IS_SUM, job=job))  # OptimStep needs gradients
    error = call_error(getattr(stub, method), make(sid, job))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and words in error.details()
