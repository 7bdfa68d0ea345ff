"""A job's EnvHosts named by `EnvironmentReference.envhost`, resolved to addresses when it runs.

The Scheduler checked at SubmitJob that each name was the tenant's own or the stack's; the
EnvHost may have moved (a laptop with a new address) or gone since, so the Coordinator asks again
(ListWorkers with its admin key) and writes the address into its copy of the job, where the
Rollout's episodes and the Coordinator's matches read it. The rule is `opentinker_runtime.core.envhost_choice`:
only the job's own tenant's EnvHosts and the stack's are candidates. Calls to them carry only the
job's token (the Rollout's and the matches' EnvHost clients).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from google.protobuf.message import Message

from opentinker_api.common.v1 import environment_pb2, resources_pb2
from opentinker_api.scheduler.v1 import job_pb2, worker_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as scheduler_pb
from opentinker_runtime.core.envhost_choice import EnvHostEntry, pick_envhost

ListEnvHosts = Callable[[], Awaitable[list[worker_pb2.Worker]]]
ENVIRONMENT_REFERENCE = environment_pb2.EnvironmentReference.DESCRIPTOR.full_name


class EnvHostNotRegistered(RuntimeError):
    """A job names an EnvHost that is no longer registered for its tenant."""


def environment_references(message: Message, path: str = "spec") -> Iterator[tuple[str, Message]]:
    """(path, message) of every EnvironmentReference below `message` (mutable: the job's own)."""
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None or descriptor.message_type.GetOptions().map_entry:
            continue
        items = value if descriptor.is_repeated else [value]
        for index, item in enumerate(items):
            item_path = f"{path}.{descriptor.name}" + (f"[{index}]" if descriptor.is_repeated else "")
            if descriptor.message_type.full_name == ENVIRONMENT_REFERENCE:
                yield item_path, item
            elif descriptor.message_type.full_name != "google.protobuf.Struct":
                yield from environment_references(item, item_path)


async def resolve_envhosts(job: job_pb2.Job, list_envhosts: ListEnvHosts) -> job_pb2.Job:
    """`job` with every named EnvHost's current address in `envhost_address` (the job itself when
    it names none); EnvHostNotRegistered when a name resolves to nothing."""
    if not any(reference.envhost for _, reference in environment_references(job.spec)):
        return job
    entries = [EnvHostEntry(worker_id=w.worker_id, name=w.name, tenant_id=w.tenant_id, address=w.address,
                            alive=w.state != worker_pb2.Worker.STATE_DEAD) for w in await list_envhosts()]
    resolved = job_pb2.Job()
    resolved.CopyFrom(job)
    for path, reference in environment_references(resolved.spec):
        if reference.envhost:
            chosen = pick_envhost(entries, reference.envhost, job.tenant_id)
            if chosen is None:
                raise EnvHostNotRegistered(f"{path}.envhost: no EnvHost {reference.envhost[:100]!r} is registered "
                                           "for the job's tenant any more (start it again with `opentinker envhost "
                                           "--name NAME`)")
            reference.envhost_address = chosen.address
    return resolved


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
