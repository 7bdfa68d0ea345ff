"""A JobSpec resolved once: `resolve_job_plan(spec)` checks it and returns a JobPlan of plain values
with every default applied (`defaults.DEFAULTS`, shown in docs/job_spec.md), or raises a
ResolveError naming the field. The Scheduler's SubmitJob and the Coordinator's launcher both use it;
the Trainer and Rollout read the defaults their own APIs share (`defaults`, `models`).

Files: `plan` (the dataclasses), `defaults` (the table), `bounds` (the limits), `resolve` (the
whole spec) with `resolve_policy`, `resolve_algorithm`, `resolve_training`, `resolve_environment`
(one section each), `models` (ModelReference and Adaptation), `scalars` (checks of every set
scalar), `names` (enum names), `errors`.
"""

from opentinker_runtime.jobplan.errors import ResolveError
from opentinker_runtime.jobplan.plan import JobKind, JobPlan, PolicyPlan
from opentinker_runtime.jobplan.resolve import resolve_job_plan

__all__ = ["JobKind", "JobPlan", "PolicyPlan", "ResolveError", "resolve_job_plan"]
