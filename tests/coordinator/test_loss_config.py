"""The loss a job trains with: the job type's default under the spec's own settings."""

from opentinker_api.common.v1 import algorithm_pb2 as algo
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_coordinator.adapters.remote import loss_config


def rl_job(**loss_fields) -> job_pb2.Job:
    job = job_pb2.Job()
    job.spec.type = job_pb2.JOB_TYPE_RL
    job.spec.policy.sampling.temperature = 0.7
    if loss_fields:
        job.spec.policy.algorithm.loss.CopyFrom(algo.LossConfig(**loss_fields))
    return job


def test_an_rl_job_without_a_loss_gets_ppo_clip_at_the_sampling_temperature():
    loss = loss_config(rl_job())
    assert loss.function == algo.LOSS_FUNCTION_PPO_CLIP
    assert abs(loss.clip_low - 0.2) < 1e-6 and abs(loss.clip_high - 0.2) < 1e-6
    assert abs(loss.temperature - 0.7) < 1e-6


def test_setting_only_the_aggregation_keeps_the_default_function_and_clip_range():
    loss = loss_config(rl_job(aggregation=algo.LOSS_AGGREGATION_SEQUENCE_MEAN))
    assert loss.aggregation == algo.LOSS_AGGREGATION_SEQUENCE_MEAN
    assert loss.function == algo.LOSS_FUNCTION_PPO_CLIP
    assert loss.clip_low > 0


def test_fields_the_spec_sets_win_over_the_defaults():
    loss = loss_config(rl_job(function=algo.LOSS_FUNCTION_GSPO, clip_low=0.1, kl_coef=0.05, temperature=1.0))
    assert loss.function == algo.LOSS_FUNCTION_GSPO
    assert abs(loss.clip_low - 0.1) < 1e-6 and abs(loss.clip_high - 0.2) < 1e-6
    assert abs(loss.kl_coef - 0.05) < 1e-6 and loss.temperature == 1.0


def test_an_sft_job_defaults_to_cross_entropy():
    job = job_pb2.Job()
    job.spec.type = job_pb2.JOB_TYPE_SFT
    assert loss_config(job).function == algo.LOSS_FUNCTION_CROSS_ENTROPY


def test_tinkers_losses_and_the_sum_reduction_reach_the_trainer_as_the_spec_sets_them():
    """The Trainer accepts what comes out (its own conversion and validation run on it)."""
    from opentinker_trainer import convert

    dro = loss_config(rl_job(function=algo.LOSS_FUNCTION_DRO, dro_beta=0.05,
                             aggregation=algo.LOSS_AGGREGATION_SUM))
    assert (dro.function, dro.aggregation) == (algo.LOSS_FUNCTION_DRO, algo.LOSS_AGGREGATION_SUM)
    assert abs(dro.dro_beta - 0.05) < 1e-6 and convert.loss_config(dro).dro_beta > 0
    cispo = loss_config(rl_job(function=algo.LOSS_FUNCTION_CISPO, clip_high=3.0))
    assert abs(cispo.clip_low - 0.2) < 1e-6 and abs(cispo.clip_high - 3.0) < 1e-6  # 0 = the RL default
    assert convert.loss_config(cispo).clip_high == 3.0
    assert convert.loss_config(loss_config(rl_job(
        function=algo.LOSS_FUNCTION_IMPORTANCE_SAMPLING))).uses_ratio
