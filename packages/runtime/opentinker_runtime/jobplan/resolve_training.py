"""How long a job trains and how (TrainingConfig, AsyncConfig), what it reads (DatasetReference)
and what an INFERENCE job writes (InferenceConfig)."""

from __future__ import annotations

from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import bounds, defaults
from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.names import enum_name
from opentinker_runtime.jobplan.plan import AsyncPlan, DatasetPlan, InferencePlan, InFlight, JobKind, TrainingPlan

SESSION_TRAINING_FIELDS = ("seed", "max_tokens_per_micro_batch", "max_retries")
"""The spec.training fields a SESSION job reads (max_retries only as 0: it is never retried)."""


def check_range(path: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ResolveError(path, f"must be between {low} and {high}, got {value}")


def check_training(training: job_pb2.TrainingConfig, kind: JobKind) -> None:
    """RL and SFT jobs say how long they train; only SFT jobs stop on a target loss."""
    check_range("spec.training.total_steps", training.total_steps, 1, bounds.MAX_TOTAL_STEPS)
    check_range("spec.training.batch_size", training.batch_size, 1, bounds.MAX_BATCH_SIZE)
    if kind is JobKind.RL or training.group_size:
        check_range("spec.training.group_size", training.group_size, 1, bounds.MAX_GROUP_SIZE)
    if training.HasField("max_retries"):
        check_range("spec.training.max_retries", training.max_retries, 0, bounds.MAX_RETRIES)
    if training.target_loss and kind is not JobKind.SFT:
        raise ResolveError("spec.training.target_loss", "only SFT jobs stop on a target loss; leave it 0 for "
                           "other job types")


def check_session_training(training: job_pb2.TrainingConfig) -> None:
    """A SESSION job's client drives every step: it reads only the seed and the micro-batch budget,
    and is never retried (its client's state cannot be replayed)."""
    for descriptor, _ in training.ListFields():
        if descriptor.name not in SESSION_TRAINING_FIELDS:
            raise ResolveError(f"spec.training.{descriptor.name}", "must not be set for a SESSION job: its client "
                               "drives every step (a SESSION job reads only spec.training.seed and "
                               "max_tokens_per_micro_batch)")
    if training.max_retries:
        raise ResolveError("spec.training.max_retries", f"must be 0 or unset for a SESSION job, got "
                           f"{training.max_retries}: a session is never retried (its client's state cannot be "
                           "replayed)")


def training_plan(training: job_pb2.TrainingConfig, kind: JobKind) -> TrainingPlan:
    return TrainingPlan(
        total_steps=training.total_steps, batch_size=training.batch_size, group_size=training.group_size,
        max_tokens_per_micro_batch=training.max_tokens_per_micro_batch,
        eval_every_steps=training.eval_every_steps,
        eval_episodes=training.eval_episodes or defaults.EVAL_EPISODES,
        checkpoint_every_steps=training.checkpoint_every_steps, max_retries=retries_allowed(training, kind),
        seed=training.seed, max_duration_s=training.max_duration.ToNanoseconds() / 1e9,
        target_loss=training.target_loss)


def retries_allowed(training: job_pb2.TrainingConfig, kind: JobKind) -> int:
    """Re-queues after a worker loss; never for a SESSION job."""
    if kind is JobKind.SESSION:
        return 0
    return training.max_retries if training.HasField("max_retries") else defaults.MAX_RETRIES


def check_async(config: job_pb2.AsyncConfig, kind: JobKind) -> None:
    """k in 0..MAX_STALENESS, and k >= 1 only where a Rollout runs ahead of a Trainer (RL)."""
    path = "spec.async.max_staleness"
    if config.max_staleness > bounds.MAX_STALENESS:
        raise ResolveError(path, f"must be between 0 and {bounds.MAX_STALENESS} (0 = synchronous), "
                           f"got {config.max_staleness}")
    if config.max_staleness and kind is not JobKind.RL:
        raise ResolveError(path, f"only RL jobs run asynchronously (the Rollout sampling ahead of the Trainer); "
                           f"an {kind} job has no such overlap: leave spec.async unset or max_staleness 0")


def async_plan(config: job_pb2.AsyncConfig) -> AsyncPlan:
    in_flight = enum_name(job_pb2.AsyncConfig.InFlight, config.in_flight) or defaults.IN_FLIGHT
    return AsyncPlan(max_staleness=config.max_staleness, in_flight=InFlight(in_flight))


def dataset_plan(dataset: job_pb2.DatasetReference) -> DatasetPlan:
    return DatasetPlan(path=dataset.path, messages_field=dataset.messages_field or defaults.MESSAGES_FIELD)


def inference_plan(inference: job_pb2.InferenceConfig, job_id: str) -> InferencePlan:
    return InferencePlan(num_episodes=inference.num_episodes or defaults.INFERENCE_EPISODES,
                         output_path=output_file(inference.output_path, job_id))


def output_file(output_path: str, job_id: str) -> str:
    """Where an INFERENCE job writes (relative to its tenant's outputs/): the spec's path, else
    `<job_id>.jsonl`; "" when neither is known yet (a spec checked before its job has an id)."""
    if output_path or not job_id:
        return output_path
    return defaults.OUTPUT_FILE.format(job_id=job_id)
