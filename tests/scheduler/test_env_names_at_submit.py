"""SubmitJob checks a spec's env names against the games the registered EnvHosts serve (real
Scheduler over gRPC, real Redis, EnvHosts registered by the EnvHost's own registration code).

A name no candidate EnvHost serves is INVALID_ARGUMENT naming the known environments; where that
cannot be decided (no EnvHost registered yet, an address nobody registered, an EnvHost that does
not publish its games) the job is queued and a wrong name fails at run time instead. A tenant's
jobs see only their own EnvHosts and the stack's: a refusal never lists another tenant's games.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from opentinker_api.common.v1 import environment_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker_runtime.auth.api_keys import new_api_key
from opentinker_runtime.core.envhost_catalog import ENVIRONMENTS_LABEL
from opentinker_runtime.core.server import HealthReporter
from opentinker_runtime.games import builtin_games
from opentinker_envhost.catalog import GameCatalog
from opentinker_envhost.registration import envhost_registration
from opentinker_envhost.settings import EnvHostSettings
from opentinker_scheduler.convert_jobs import facts_from_spec, spec_blob
from opentinker_scheduler.model import Caller, Role, WorkerRegistration
from tests.scheduler._harness import Harness, reason_of, register_request, rl_spec, rpc_error, scheduler_server
from tests.scheduler._round_trips import RoundTrips
from tests.scheduler._tenants import new_tenant, stub_for

ADMIN_KEY = new_api_key()
BUILTINS = ", ".join(sorted(builtin_games()))
pytestmark = pytest.mark.timeout(60)


def known_with(*games: str) -> str:
    return ", ".join(sorted({*builtin_games(), *games}))


@contextlib.asynccontextmanager
async def registered_envhost(h: Harness, key: str, *, games: str = "none", name: str = "",
                             port: int = 7001) -> AsyncIterator[None]:
    """An EnvHost's registration (its games, its name) with the Scheduler, under `key`."""
    settings = EnvHostSettings(scheduler_address=h.address, api_key=key, name=name, port=port, games=games)
    registration = envhost_registration(settings, GameCatalog.from_setting(games))
    await registration.start(HealthReporter([]))
    try:
        await registration.agent.wait_registered(10)
        yield
    finally:
        await registration.stop()


def spec_for(env_name: str, *, envhost: str = "", address: str = "", job_type: int = job_pb2.JOB_TYPE_RL,
             eval_env: str = "") -> job_pb2.JobSpec:
    spec = rl_spec()
    spec.type = job_type
    spec.environment.CopyFrom(environment_pb2.EnvironmentReference(env_name=env_name, envhost=envhost,
                                                                   envhost_address=address))
    if job_type == job_pb2.JOB_TYPE_SFT:
        spec.dataset.path = "data/sft.jsonl"
    if eval_env:
        spec.multi_agent.eval_environment.env_name = eval_env
    return spec


async def submit(stub, spec: job_pb2.JobSpec, *, validate_only: bool = False):  # noqa: ANN001, ANN201
    return await stub.SubmitJob(pb.SubmitJobRequest(spec=spec, validate_only=validate_only))


async def refusal(stub, spec: job_pb2.JobSpec) -> str:  # noqa: ANN001
    error = await rpc_error(submit(stub, spec))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert reason_of(error) == "ERROR_REASON_INVALID_FIELD"
    return error.details()


def test_a_misspelt_env_name_is_refused_at_submit_naming_the_known_environments(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h, \
                registered_envhost(h, ADMIN_KEY, games="reverse=tests.envhost.games:Echo"):
            details = await refusal(h.stub, spec_for("revers"))
            assert details.startswith(f"spec.environment.env_name: no environment named 'revers' on the registered "
                                      f"EnvHosts (did you mean 'reverse'?); known: {known_with('reverse')}; to play a "
                                      "game of your own, serve it with `opentinker envhost")
            assert "env_name" in (await rpc_error(submit(h.stub, spec_for("revers"), validate_only=True))).details()
            assert (await submit(h.stub, spec_for("reverse"))).job.state == job_pb2.Job.STATE_QUEUED
            assert (await submit(h.stub, spec_for("math", job_type=job_pb2.JOB_TYPE_INFERENCE))).job.job_id
            inference = spec_for("mth", job_type=job_pb2.JOB_TYPE_INFERENCE)
            assert "did you mean 'math'?" in await refusal(h.stub, inference)
            # an SFT job ignores its environment: nothing to check
            assert (await submit(h.stub, spec_for("revers", job_type=job_pb2.JOB_TYPE_SFT))).job.job_id
            workers = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers
            assert [dict(w.labels) for w in workers] == [{ENVIRONMENTS_LABEL: known_with("reverse").replace(", ", ",")}]

    asyncio.run(scenario())


def test_every_environment_of_a_spec_is_checked_and_the_refusal_names_its_field(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h, registered_envhost(h, ADMIN_KEY):
            spec = spec_for("gomoku", eval_env="gomok")
            for agent_id in ("black", "white"):
                agent = spec.agents.add()
                agent.CopyFrom(spec.policy)
                agent.agent_id = agent_id
            spec.ClearField("policy")
            details = await refusal(h.stub, spec)
            assert details.startswith("spec.multi_agent.eval_environment.env_name: no environment named 'gomok'")

    asyncio.run(scenario())


def test_where_the_answer_is_not_known_at_submit_the_job_is_queued(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            # a stack starting up: no EnvHost registered yet
            assert (await submit(h.stub, spec_for("revers"))).job.job_id
            # an admin's raw address nobody registered: never dialled to ask
            assert (await submit(h.stub, spec_for("revers", address="10.9.9.9:50054"))).job.job_id
            async with registered_envhost(h, ADMIN_KEY):
                assert "known: " in await refusal(h.stub, spec_for("revers"))
                # the registered EnvHost at that address answers for it
                address = (await h.stub.ListWorkers(pb.ListWorkersRequest())).workers[0].address
                details = await refusal(h.stub, spec_for("revers", address=address))
                assert f"no environment named 'revers' on the EnvHost at {address}; known: {BUILTINS}" in details
                # an EnvHost that does not publish its games (an older one) may serve anything
                await h.stub.RegisterWorker(register_request("envhost@old", "envhost", devices=0,
                                                             address="127.0.0.1:7002"))
                assert (await submit(h.stub, spec_for("revers"))).job.job_id

    asyncio.run(scenario())


def test_a_tenant_sees_only_its_own_envhosts_games_and_the_stacks(redis_url: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            acme_key, globex_key = await new_tenant(h, "acme"), await new_tenant(h, "globex")
            a_channel, acme = stub_for(h.address, acme_key)
            g_channel, globex = stub_for(h.address, globex_key)
            async with a_channel, g_channel, \
                    registered_envhost(h, ADMIN_KEY, name="stack-games", port=7001), \
                    registered_envhost(h, acme_key, games="secret_game=tests.envhost.games:Echo", name="games",
                                       port=7003):
                assert (await submit(acme, spec_for("secret_game", envhost="games"))).job.job_id
                assert (await submit(acme, spec_for("math", envhost="games"))).job.job_id
                # without `envhost` the job plays on the stack's default EnvHost, which lacks the game
                details = await refusal(acme, spec_for("secret_game"))
                assert f"on the registered EnvHosts; known: {BUILTINS}; to play a game of your own" in details
                details = await refusal(acme, spec_for("secret_game", envhost="stack-games"))
                assert details == ("spec.environment.env_name: no environment named 'secret_game' on EnvHost "
                                   f"'stack-games'; known: {BUILTINS}")
                # another tenant never learns acme's games, nor that its EnvHost exists
                for spec in (spec_for("secret_gam"), spec_for("secret_gam", envhost="stack-games")):
                    assert "secret_game" not in await refusal(globex, spec)
                hidden = await rpc_error(submit(globex, spec_for("secret_game", envhost="games")))
                assert reason_of(hidden) == "ERROR_REASON_ENVHOST_NOT_FOUND"

    asyncio.run(scenario())


@pytest.mark.parametrize(("labels", "field"), [
    ({f"k{i}": "v" for i in range(33)}, "labels"),
    ({"k" * 129: "v"}, "labels"),
    ({ENVIRONMENTS_LABEL: "g," * 9000}, f"labels['{ENVIRONMENTS_LABEL}']"),
])
def test_a_workers_labels_are_bounded(redis_url: str, labels: dict, field: str) -> None:
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h:
            request = register_request("envhost@big", "envhost", devices=0)
            request.labels.update(labels)
            error = await rpc_error(h.stub.RegisterWorker(request))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and error.details().startswith(f"{field}: ")

    asyncio.run(scenario())


def test_a_recent_snapshot_of_the_envhosts_costs_no_round_trip_and_a_refusal_is_read_anew(redis_url: str) -> None:
    """SubmitJob accepts on the EnvHosts as last read (here, or by an allocator pass) without a
    Redis round trip of its own, and refuses only on a fresh read: an EnvHost registered through
    another replica since the snapshot counts."""
    async def scenario() -> None:
        async with scheduler_server(redis_url, admin_key=ADMIN_KEY) as h, registered_envhost(h, ADMIN_KEY):
            await submit(h.stub, spec_for("math"))  # reads the EnvHosts
            spec = spec_for("math")
            trips = RoundTrips(h.scheduler.jobs.store.client)
            await h.scheduler.jobs.submit(facts_from_spec(spec), spec_blob(spec), caller=Caller(tenant_id="t", admin=True),
                                          request_id="")
            assert trips.count == 1  # the SUBMIT itself
            elsewhere = WorkerRegistration(worker_id="envhost@elsewhere", role=Role.ENVHOST, address="127.0.0.1:7009",
                                           devices=(), labels={ENVIRONMENTS_LABEL: "reverse"})
            await h.scheduler.pool.registry.put(elsewhere, ttl_ms=10_000)  # not through this replica's pool
            assert (await submit(h.stub, spec_for("reverse"))).job.job_id

    asyncio.run(scenario())
