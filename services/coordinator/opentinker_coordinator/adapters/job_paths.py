"""A job's file paths resolved inside its tenant's area before anything opens them.

The Scheduler lets only admin keys name absolute paths (or, for models, paths in the shared model
directory); every relative path is resolved here, with symlinks followed, inside the job's tenant
area (`opentinker_runtime.auth.tenant_paths`), and the plan the drivers see carries the resolved
paths: the INFERENCE output, the SFT dataset, local models (sent on to Trainer and Rollout) and the
path entries of game configs. Paths that lead out of the area, do not exist or cannot be read all
fail the run with the same message.
"""

from __future__ import annotations

import copy
import dataclasses

from opentinker_runtime.auth.tenant_paths import TenantAreas, config_path_entries
from opentinker_runtime.jobplan.plan import EnvironmentPlan, JobPlan, PolicyPlan
from opentinker_runtime.ml.sources import ModelKind


def confine_plan_paths(plan: JobPlan, tenant_id: str, areas: TenantAreas) -> JobPlan:
    """`plan` with its relative paths made absolute paths inside the tenant's area; PathRefused
    (a ValueError naming the field) for a path that leads out, is missing or cannot be read."""
    confine = PathConfinement(areas=areas, tenant_id=tenant_id)
    league = plan.multi_agent
    if league is not None:
        league = dataclasses.replace(league, eval_environment=confine.environment(league.eval_environment))
    return dataclasses.replace(
        plan, policy=confine.policy(plan.policy), agents=tuple(confine.policy(agent) for agent in plan.agents),
        environment=confine.environment(plan.environment), multi_agent=league,
        inference=plan.inference and dataclasses.replace(plan.inference, output_path=confine.output(
            plan.inference.output_path)),
        dataset=plan.dataset and dataclasses.replace(plan.dataset, path=confine.dataset(plan.dataset.path)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PathConfinement:
    areas: TenantAreas
    tenant_id: str

    def output(self, path: str) -> str:
        if path.startswith("/"):
            return path
        return str(self.areas.output(self.tenant_id, path, "spec.inference.output_path"))

    def dataset(self, path: str) -> str:
        if not path or path.startswith("/"):
            return path
        return str(self.areas.dataset(self.tenant_id, path, "spec.dataset.path"))

    def policy(self, policy: PolicyPlan | None) -> PolicyPlan | None:
        if policy is None or policy.model.kind != ModelKind.LOCAL:
            return policy
        model = policy.model
        field = f"{policy.path}.model.local"
        return dataclasses.replace(policy, model=dataclasses.replace(
            model, path=self._model(model.path, f"{field}.path"),
            tokenizer_path=self._model(model.tokenizer_path, f"{field}.tokenizer_path")))

    def _model(self, path: str, field: str) -> str:
        if path and (not path.startswith("/") or self.areas.in_shared_model_dir(path)):
            return str(self.areas.model(self.tenant_id, path, field))
        return path

    def environment(self, environment: EnvironmentPlan | None) -> EnvironmentPlan | None:
        """Path entries of a game config name files in the tenant's datasets/, whichever EnvHost
        plays it (a named one may be the stack's own, or an operator's sharing the stack's files).
        Only a raw envhost_address, an admin-only field, keeps its config as it is."""
        if environment is None or (environment.envhost_address and not environment.envhost):
            return environment
        config = copy.deepcopy(dict(environment.config))
        entries = [entry for entry in config_path_entries(config, f"{environment.path}.config")
                   if not entry[1][entry[2]].startswith("/")]
        for name, container, key in entries:
            container[key] = str(self.areas.dataset(self.tenant_id, container[key], name))
        return dataclasses.replace(environment, config=config) if entries else environment


__all__ = ["confine_plan_paths"]
