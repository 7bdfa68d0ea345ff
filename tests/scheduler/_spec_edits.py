"""Edits of the harness's rl_spec() that several SubmitJob tests make: two agents instead of one
policy, an SFT or an inference job, and a spec with edits applied."""

from __future__ import annotations

from collections.abc import Callable

from opentinker_api.scheduler.v1 import job_pb2
from tests.scheduler._harness import rl_spec


def two_agents(spec: job_pb2.JobSpec) -> job_pb2.JobSpec:
    """The rl_spec's policy as two agents of a multi-agent job."""
    policy = job_pb2.AgentSpec()
    policy.CopyFrom(spec.policy)
    spec.ClearField("policy")
    for name in ("black", "white"):
        agent = spec.agents.add()
        agent.CopyFrom(policy)
        agent.agent_id = name
    return spec


def sft(spec: job_pb2.JobSpec) -> job_pb2.JobSpec:
    spec.type = job_pb2.JOB_TYPE_SFT
    spec.dataset.path = "data/sft.jsonl"
    spec.environment.ClearField("env_name")
    return spec


def inference(spec: job_pb2.JobSpec) -> job_pb2.JobSpec:
    spec.type = job_pb2.JOB_TYPE_INFERENCE
    spec.ClearField("training")
    spec.policy.ClearField("adaptation")
    spec.policy.algorithm.ClearField("optimizer")
    return spec


def edited(*edits: Callable[[job_pb2.JobSpec], object], base: Callable[[], job_pb2.JobSpec] = rl_spec
           ) -> job_pb2.JobSpec:
    spec = base()
    for edit in edits:
        edit(spec)
    return spec
