"""Where a job plays (EnvironmentReference) and how a multi-agent job's agents meet (MultiAgentConfig)."""

from __future__ import annotations

from google.protobuf import json_format

from opentinker_api.common.v1 import environment_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_runtime.jobplan import defaults
from opentinker_runtime.jobplan.names import enum_name
from opentinker_runtime.jobplan.plan import EnvironmentPlan, MultiAgentPlan, Pairing


def environment_plan(environment: environment_pb2.EnvironmentReference, path: str) -> EnvironmentPlan:
    return EnvironmentPlan(path=path, env_name=environment.env_name,
                           config=json_format.MessageToDict(environment.config),
                           envhost=environment.envhost, envhost_address=environment.envhost_address)


def multi_agent_plan(config: job_pb2.MultiAgentConfig) -> MultiAgentPlan:
    pairing = enum_name(job_pb2.MultiAgentConfig.Pairing, config.pairing) or defaults.PAIRING
    eval_environment = (environment_plan(config.eval_environment, "spec.multi_agent.eval_environment")
                        if config.HasField("eval_environment") else None)
    return MultiAgentPlan(pairing=Pairing(pairing), eval_environment=eval_environment,
                          elo_k=config.elo_k or defaults.ELO_K,
                          barrier_timeout_s=config.barrier_timeout_seconds or defaults.BARRIER_TIMEOUT_S)
