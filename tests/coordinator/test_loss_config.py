"""The loss a job trains with: the job type's default under the spec's own settings, resolved in
the job's plan and sent to the Trainer as the plan says."""

from opentinker_api.common.v1 import algorithm_pb2 as algo
from opentinker_runtime.jobplan import resolve_job_plan
from opentinker_coordinator.adapters.plan_messages import loss_message
from tests.jobplan.specs import least_spec


def loss_config(kind: str = "RL", **loss_fields) -> algo.LossConfig:
    """The LossConfig the Coordinator sends for a job whose policy samples at temperature 0.7."""
    spec = least_spec(kind, **{"policy.sampling.temperature": 0.7})
    if loss_fields:
        spec.policy.algorithm.loss.CopyFrom(algo.LossConfig(**loss_fields))
    return loss_message(resolve_job_plan(spec).policy.loss)


def test_an_rl_job_without_a_loss_gets_ppo_clip_at_the_sampling_temperature():
    loss = loss_config()
    assert loss.function == algo.LOSS_FUNCTION_PPO_CLIP
    assert abs(loss.clip_low - 0.2) < 1e-6 and abs(loss.clip_high - 0.2) < 1e-6
    assert abs(loss.temperature - 0.7) < 1e-6


def test_setting_only_the_aggregation_keeps_the_default_function_and_clip_range():
    loss = loss_config(aggregation=algo.LOSS_AGGREGATION_SEQUENCE_MEAN)
    assert loss.aggregation == algo.LOSS_AGGREGATION_SEQUENCE_MEAN
    assert loss.function == algo.LOSS_FUNCTION_PPO_CLIP
    assert loss.clip_low > 0


def test_fields_the_spec_sets_win_over_the_defaults():
    loss = loss_config(function=algo.LOSS_FUNCTION_GSPO, clip_low=0.1, kl_coef=0.05, temperature=1.0)
    assert loss.function == algo.LOSS_FUNCTION_GSPO
    assert abs(loss.clip_low - 0.1) < 1e-6 and abs(loss.clip_high - 0.2) < 1e-6
    assert abs(loss.kl_coef - 0.05) < 1e-6 and loss.temperature == 1.0


def test_an_sft_job_defaults_to_cross_entropy():
    assert loss_config("SFT").function == algo.LOSS_FUNCTION_CROSS_ENTROPY


def test_tinkers_losses_and_the_sum_reduction_reach_the_trainer_as_the_spec_sets_them():
    """The Trainer accepts what comes out (its own conversion and validation run on it)."""
    from opentinker_trainer import convert

    dro = loss_config(function=algo.LOSS_FUNCTION_DRO, dro_beta=0.05, aggregation=algo.LOSS_AGGREGATION_SUM)
    assert (dro.function, dro.aggregation) == (algo.LOSS_FUNCTION_DRO, algo.LOSS_AGGREGATION_SUM)
    assert abs(dro.dro_beta - 0.05) < 1e-6 and convert.loss_config(dro).dro_beta > 0
    cispo = loss_config(function=algo.LOSS_FUNCTION_CISPO, clip_high=3.0)
    assert abs(cispo.clip_low - 0.2) < 1e-6 and abs(cispo.clip_high - 3.0) < 1e-6  # 0 = the RL default
    assert convert.loss_config(cispo).clip_high == 3.0
    assert convert.loss_config(loss_config(function=algo.LOSS_FUNCTION_IMPORTANCE_SAMPLING)).uses_ratio


def test_the_wire_says_no_kl_penalty_and_no_mask_with_their_zero_values():
    loss = loss_config()
    assert loss.kl_placement == algo.KL_PLACEMENT_UNSPECIFIED and loss.importance_mask == algo.IMPORTANCE_MASK_UNSPECIFIED
    assert loss.kl_estimator == algo.KL_ESTIMATOR_K3 and abs(loss.importance_mask_high - 2.0) < 1e-6
