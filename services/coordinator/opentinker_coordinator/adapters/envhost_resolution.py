"""A job's EnvHosts named by `EnvironmentReference.envhost`, resolved to addresses when it runs.

The Scheduler checked at SubmitJob that each name was the tenant's own or the stack's; the
EnvHost may have moved (a laptop with a new address) or gone since, so the Coordinator asks again
(ListWorkers with its admin key) and writes the address into the job's plan, where the Rollout's
episodes and the Coordinator's matches read it. The rule is `opentinker_runtime.core.envhost_choice`:
only the job's own tenant's EnvHosts and the stack's are candidates. Calls to them carry only the
job's token (the Rollout's and the matches' EnvHost clients).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_runtime.core.envhost_choice import EnvHostEntry, pick_envhost
from opentinker_runtime.jobplan.plan import EnvironmentPlan, JobPlan

ListEnvHosts = Callable[[], Awaitable[list[worker_pb2.Worker]]]


class EnvHostNotRegistered(RuntimeError):
    """A job names an EnvHost that is no longer registered for its tenant."""


async def resolve_envhosts(plan: JobPlan, tenant_id: str, list_envhosts: ListEnvHosts) -> JobPlan:
    """`plan` with every named EnvHost's current address in `envhost_address` (the plan itself when
    it names none); EnvHostNotRegistered when a name resolves to nothing."""
    if not any(environment.envhost for environment in plan.environments):
        return plan
    entries = [EnvHostEntry(worker_id=w.worker_id, name=w.name, tenant_id=w.tenant_id, address=w.address,
                            alive=w.state != worker_pb2.Worker.STATE_DEAD) for w in await list_envhosts()]

    def addressed(environment: EnvironmentPlan | None) -> EnvironmentPlan | None:
        if environment is None or not environment.envhost:
            return environment
        chosen = pick_envhost(entries, environment.envhost, tenant_id)
        if chosen is None:
            raise EnvHostNotRegistered(f"{environment.path}.envhost: no EnvHost {environment.envhost[:100]!r} is "
                                       "registered for the job's tenant any more (start it again with `opentinker "
                                       "envhost --name NAME`)")
        return dataclasses.replace(environment, envhost_address=chosen.address)

    league = plan.multi_agent
    if league is not None:
        league = dataclasses.replace(league, eval_environment=addressed(league.eval_environment))
    return dataclasses.replace(plan, environment=addressed(plan.environment), multi_agent=league)


def scheduler_envhosts(stub, call) -> ListEnvHosts:  # noqa: ANN001 - SchedulerServiceStub, CallGuard.call
    """Every registered EnvHost, paged through ListWorkers (the Coordinator's admin key sees all)."""
    async def list_envhosts() -> list[worker_pb2.Worker]:
        workers: list[worker_pb2.Worker] = []
        token = ""
        while True:
            request = scheduler_pb.ListWorkersRequest(role=resources_pb2.ROLE_ENVHOST, page_size=500, page_token=token)
            page = await call("ListWorkers", lambda: stub.ListWorkers(request))
            workers.extend(page.workers)
            if not (token := page.next_page_token):
                return workers
    return list_envhosts
