"""What the Coordinator asks the Trainer for when it opens a job's session."""

from __future__ import annotations

from opentinker_api.common.v1 import algorithm_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import resolve_job_plan
from opentinker_coordinator.adapters.plan_messages import optimizer_message
from opentinker_coordinator.launch import trainer_session
from tests.jobplan.specs import least_spec


def job(total_steps: int, optimizer: dict) -> job_pb2.Job:
    spec = least_spec("RL", **{"training.total_steps": total_steps})
    spec.policy.algorithm.optimizer.CopyFrom(algorithm_pb2.OptimizerConfig(**optimizer))
    return job_pb2.Job(job_id="j", spec=spec)


def session_optimizer(leased: job_pb2.Job) -> algorithm_pb2.OptimizerConfig:
    return optimizer_message(resolve_job_plan(leased.spec).policy.optimizer)


def test_a_decay_schedule_without_total_steps_decays_over_the_jobs_steps() -> None:
    cosine = {"learning_rate": 1e-3, "schedule": algorithm_pb2.LR_SCHEDULE_COSINE}
    assert session_optimizer(job(40, cosine)).total_steps == 40
    assert session_optimizer(job(40, cosine | {"total_steps": 25})).total_steps == 25
    original = job(40, cosine)
    session_optimizer(original)
    assert original.spec.policy.algorithm.optimizer.total_steps == 0  # the job is not modified


def test_the_session_runs_on_the_trainer_devices_of_the_assignment() -> None:
    leased = job(1, {"learning_rate": 1e-3})
    plan = resolve_job_plan(leased.spec)
    assert trainer_session(leased, plan, plan.policy).device_ids == ()
    leased.assignments.add(role=resources_pb2.ROLE_ROLLOUT, device_ids=["cpu:0"])
    leased.assignments.add(role=resources_pb2.ROLE_TRAINER, device_ids=["cpu:1", "cpu:0"])
    assert trainer_session(leased, plan, plan.policy).device_ids == ("cpu:1", "cpu:0")
