"""Which builtin model a checkpoint was trained from, and so its context window.

A Trainer names a job's checkpoints "<job id>-<name>" ("job-<hex>-final", "job-<hex>-step-5",
"job-<hex>-final-<agent>"), so the job that saved one is known, and that job's spec names its model:
a builtin model, or a checkpoint of another job (followed up to MAX_HOPS). Anything else (a local
model, an id not of that form, a job no longer stored) leaves the window unknown: None.
"""

from __future__ import annotations

import re
from typing import Protocol

from google.protobuf.message import DecodeError

from opentinker_scheduler.convert_jobs import stored_spec_facts
from opentinker_scheduler.errors import InvalidArgument
from opentinker_runtime.jobplan.plan import PolicyPlan
from opentinker_runtime.ml.sources import ModelKind
from opentinker_scheduler.model import Job, JobSpecFacts
from opentinker_scheduler.model_context import ModelContext, builtin_context, check_context_limits

SAVED_BY_JOB = re.compile(r"^(job-[0-9a-f]{32})-(.+)$")
MAX_HOPS = 8


class StoredJobs(Protocol):
    async def get(self, job_id: str) -> Job | None: ...


async def check_checkpoint_contexts(facts: JobSpecFacts, jobs: StoredJobs) -> None:
    """`check_context_limits` for the agents whose model is a checkpoint of a builtin model (run
    after the caller's ownership of those checkpoints was checked)."""
    ids = {checkpoint_id for _, checkpoint_id in facts.checkpoint_refs}
    if not ids:
        return
    contexts = {checkpoint_id: await checkpoint_context(checkpoint_id, jobs) for checkpoint_id in sorted(ids)}
    check_context_limits(facts.plan, {k: v for k, v in contexts.items() if v is not None})


async def checkpoint_context(checkpoint_id: str, jobs: StoredJobs) -> ModelContext | None:
    """The context window of the builtin base `checkpoint_id` was trained from; None when unknown."""
    current = checkpoint_id
    for _ in range(MAX_HOPS):
        agent = await _saving_agent(current, jobs)
        if agent is None:
            return None
        if agent.model.kind == ModelKind.BUILTIN:
            base = builtin_context(agent.model.name)
            return None if base is None else ModelContext(tokens=base.tokens, model=checkpoint_id, base=base.model)
        if agent.model.kind != ModelKind.CHECKPOINT:
            return None
        current = agent.model.name
    return None


async def _saving_agent(checkpoint_id: str, jobs: StoredJobs) -> PolicyPlan | None:
    """The agent of the job that saved `checkpoint_id` (a multi-agent job's: the one the name ends with)."""
    match = SAVED_BY_JOB.match(checkpoint_id)
    job = await jobs.get(match.group(1)) if match else None
    if job is None:
        return None
    try:
        facts = stored_spec_facts(job.spec_blob)
    except (InvalidArgument, DecodeError):  # a spec stored by an older version this one cannot read
        return None
    plan = facts.plan
    if plan.policy is not None:
        return plan.policy
    name = match.group(2)
    return next((agent for agent in plan.agents if name.endswith(f"-{agent.agent_id}")), None)
