"""Every path-like and address-like field of every request, with a hostile value, under a tenant key.

The table has a row for every such field of every service's requests (tests/chaos/_hostile_fields:
derived from the descriptors, JobSpec recursively, so a new path or address field without a row
fails). Tenant A owns an EnvHost (registered at an address whose socket this test listens on) and
a checkpoint (its job saved it). Tenant B then puts a hostile value in each field: an absolute
path, a '..' escape into A's area, A's checkpoint id, the listening address, A's EnvHost by name
and by id. Each row says what B gets: SubmitJob refuses the path (INVALID_ARGUMENT,
PATH_NOT_ALLOWED), the raw address (PERMISSION_DENIED, ADMIN_ONLY_FIELD), the checkpoint (NOT_FOUND,
in the words an unknown id gets) and A's EnvHost (INVALID_ARGUMENT, ENVHOST_NOT_FOUND, in the words
an unregistered one gets), validate_only or not; the services a tenant key cannot call at all
refuse the request with the value in place (PERMISSION_DENIED); a tenant's registered address
serves only its own jobs. Then nothing was reached: no file appeared outside B's area, nothing
connected to the listening socket, and A's EnvHost is still A's.
"""

from __future__ import annotations

import enum
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message

from opentinker_api.common.v1 import resources_pb2
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.scheduler.v1 import scheduler_service_pb2 as pb
from opentinker.client import SchedulerClient
from opentinker.client.spec import job_spec_from_dict
from opentinker_runtime.core.errors import REASON_METADATA_KEY
from harness.job_specs import inference_spec, rl_spec, sft_spec
from harness.stack import LocalStack
from tests.chaos._hostile_fields import every_hostile_field, field_in_details, put
from tests.chaos._isolation import bearer, call, method_descriptor
from tests.chaos._security_stack import admin, stack  # noqa: F401 - the shared fixtures

pytestmark = pytest.mark.timeout(180)
A_TENANT, B_TENANT = "fields-alpha", "fields-beta"
A_ENVHOST, A_ENVHOST_ID = "alpha-games", "alpha-games-worker"
UNKNOWN_CHECKPOINT, UNKNOWN_ENVHOST = "no-such-checkpoint-7f3a", "no-such-games-7f3a"
SERVICES = {"SchedulerService": ("scheduler", "opentinker.scheduler.v1.SchedulerService"),
            "TrainerService": ("trainer", "opentinker.trainer.v1.TrainerService"),
            "RolloutService": ("rollout", "opentinker.rollout.v1.RolloutService"),
            "EnvHostService": ("envhost", "opentinker.envhost.v1.EnvHostService"),
            "CoordinatorService": ("coordinator", "opentinker.coordinator.v1.CoordinatorService")}
C = grpc.StatusCode


class Answer(enum.Enum):
    """What a tenant key gets for a hostile value in the field: (code, reason or None for any, whether
    the message starts with the field's path)."""

    PATH_NOT_ALLOWED = (C.INVALID_ARGUMENT, "ERROR_REASON_PATH_NOT_ALLOWED", True)
    ADMIN_ONLY_FIELD = (C.PERMISSION_DENIED, "ERROR_REASON_ADMIN_ONLY_FIELD", True)
    CHECKPOINT_NOT_FOUND = (C.NOT_FOUND, "ERROR_REASON_INVALID_FIELD", True)
    """In the words an unknown checkpoint id gets."""
    ENVHOST_NOT_FOUND = (C.INVALID_ARGUMENT, "ERROR_REASON_ENVHOST_NOT_FOUND", True)
    """In the words an unregistered EnvHost gets."""
    ADMIN_ONLY_RPC = (C.PERMISSION_DENIED, None, False)
    """The RPC is for admin keys only (a worker's call): refused whatever the field holds."""
    SERVICE_FOR_ADMIN_KEYS = (C.PERMISSION_DENIED, "", False)
    """Trainer, Rollout, EnvHost, Coordinator: only OpenTinker's own keys (and job tokens) call them."""
    OWN_ENVHOSTS_ONLY = (C.OK, "", False)
    """A tenant registers EnvHosts at any address; they serve only its own jobs (checked apart)."""


def rl() -> dict:
    return rl_spec(total_steps=2)


def rl_local() -> dict:
    spec = rl()
    spec["policy"]["model"] = {"local": {"path": "my-model"}}
    return spec


def two_agents(local: bool = False) -> dict:
    def agent(name: str) -> dict:
        model = {"local": {"path": "my-model"}} if local else {"builtin": {"name": "tiny-llama", "seed": 1}}
        return {"agent_id": name, "model": model, "adaptation": {"full": {}},
                "algorithm": {"optimizer": {"learning_rate": 1e-4}}, "sampling": {"max_new_tokens": 3}}
    return {"type": "RL", "environment": {"env_name": "gomoku", "config": {"size": 3, "win_length": 3}},
            "agents": [agent("black"), agent("white")],
            "multi_agent": {"pairing": "PAIRING_ROUND_ROBIN", "eval_environment": {"env_name": "gomoku"}},
            "training": {"total_steps": 2, "batch_size": 1, "group_size": 2}}


def sft() -> dict:
    return sft_spec("chats.jsonl")


@dataclass(frozen=True)
class Row:
    answer: Answer
    spec: Callable[[], dict] | None = None
    """SubmitJob: a valid spec of the kind the field belongs to, the hostile value then put in it."""


SUBMIT = "SchedulerService.SubmitJob spec."
DENIED, ADMIN_RPC = Row(Answer.SERVICE_FOR_ADMIN_KEYS), Row(Answer.ADMIN_ONLY_RPC)
ROWS: dict[str, Row] = {
    f"{SUBMIT}policy.model.local.path": Row(Answer.PATH_NOT_ALLOWED, rl),
    f"{SUBMIT}policy.model.local.tokenizer_path": Row(Answer.PATH_NOT_ALLOWED, rl_local),
    f"{SUBMIT}policy.model.checkpoint.checkpoint_id": Row(Answer.CHECKPOINT_NOT_FOUND, rl),
    f"{SUBMIT}agents[].model.local.path": Row(Answer.PATH_NOT_ALLOWED, two_agents),
    f"{SUBMIT}agents[].model.local.tokenizer_path": Row(Answer.PATH_NOT_ALLOWED, lambda: two_agents(local=True)),
    f"{SUBMIT}agents[].model.checkpoint.checkpoint_id": Row(Answer.CHECKPOINT_NOT_FOUND, two_agents),
    f"{SUBMIT}environment.envhost_address": Row(Answer.ADMIN_ONLY_FIELD, rl),
    f"{SUBMIT}environment.envhost": Row(Answer.ENVHOST_NOT_FOUND, rl),
    f"{SUBMIT}environment.config['dataset_path']": Row(Answer.PATH_NOT_ALLOWED, rl),
    f"{SUBMIT}dataset.path": Row(Answer.PATH_NOT_ALLOWED, sft),
    f"{SUBMIT}inference.output_path": Row(Answer.PATH_NOT_ALLOWED, inference_spec),
    f"{SUBMIT}multi_agent.eval_environment.envhost_address": Row(Answer.ADMIN_ONLY_FIELD, two_agents),
    f"{SUBMIT}multi_agent.eval_environment.envhost": Row(Answer.ENVHOST_NOT_FOUND, two_agents),
    f"{SUBMIT}multi_agent.eval_environment.config['dataset_path']": Row(Answer.PATH_NOT_ALLOWED, two_agents),
    "SchedulerService.RegisterWorker address": Row(Answer.OWN_ENVHOSTS_ONLY),
    "SchedulerService.ReportJobEvents events[].checkpoint.checkpoint_id": ADMIN_RPC,
    "SchedulerService.ReportJobEvents events[].checkpoint.agent_checkpoint_ids['a']": ADMIN_RPC,
    "SchedulerService.ReportJobEvents events[].progress.progress.last_checkpoint_id": ADMIN_RPC,
    "TrainerService.CreateSession base_model.local.path": DENIED,
    "TrainerService.CreateSession base_model.local.tokenizer_path": DENIED,
    "TrainerService.CreateSession base_model.checkpoint.checkpoint_id": DENIED,
    "TrainerService.SaveCheckpoint name": DENIED,
    "TrainerService.LoadCheckpoint checkpoint_id": DENIED,
    "TrainerService.CreateSession peers[].address": DENIED,
    "TrainerService.StartReplicas store_address": DENIED,
    "TrainerService.StartReplicas command_address": DENIED,
    "RolloutService.LoadModel model.local.path": DENIED,
    "RolloutService.LoadModel model.local.tokenizer_path": DENIED,
    "RolloutService.LoadModel model.checkpoint.checkpoint_id": DENIED,
    "RolloutService.RunEpisodes coordinator_address": DENIED,
    "RolloutService.RunEpisodes environment.config['dataset_path']": DENIED,
    "RolloutService.RunEpisodes environment.envhost": DENIED,
    "RolloutService.RunEpisodes environment.envhost_address": DENIED,
    "EnvHostService.OpenSession config['dataset_path']": DENIED,
    "EnvHostService.Interact open_session.config['dataset_path']": DENIED,
    "CoordinatorService.OpenMatch environment.config['dataset_path']": DENIED,
    "CoordinatorService.OpenMatch environment.envhost": DENIED,
    "CoordinatorService.OpenMatch environment.envhost_address": DENIED,
    "CoordinatorService.ResumeRun checkpoint_id": DENIED,
}


@dataclass(frozen=True)
class World:
    stack: LocalStack
    a_key: str
    b_key: str
    a_checkpoint: str
    attacker: socket.socket
    outside: Path
    """A directory outside every tenant area (a server file lies in it)."""

    @property
    def attacker_address(self) -> str:
        return f"127.0.0.1:{self.attacker.getsockname()[1]}"

    def hostile_values(self, kind: str, key: str) -> list[str]:
        slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
        return {"path": [f"{self.outside}/{slug}.jsonl", f"../../{A_TENANT}/outputs/{slug}.jsonl"],
                "checkpoint": [self.a_checkpoint], "address": [self.attacker_address],
                "envhost": [A_ENVHOST, A_ENVHOST_ID]}[kind]

    def unknown_value(self, kind: str) -> str:
        return {"checkpoint": UNKNOWN_CHECKPOINT, "envhost": UNKNOWN_ENVHOST}[kind]


@pytest.fixture(scope="module")
def world(stack: LocalStack, admin: SchedulerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """A's EnvHost (at the listening address) and A's checkpoint (from a finished job of A's)."""
    a_key = admin.create_tenant(A_TENANT).api_key_secret
    b_key = admin.create_tenant(B_TENANT).api_key_secret
    attacker = socket.create_server(("127.0.0.1", 0))
    attacker.setblocking(False)
    outside = tmp_path_factory.mktemp("outside-every-area")
    (outside / "server-secret.jsonl").write_text('{"question": "key?", "answer": "42"}\n')
    with grpc.insecure_channel(stack.address("scheduler")) as channel:
        call(channel, "opentinker.scheduler.v1.SchedulerService/RegisterWorker", pb.RegisterWorkerRequest(
            worker_id=A_ENVHOST_ID, name=A_ENVHOST, role=resources_pb2.ROLE_ENVHOST,
            address=f"127.0.0.1:{attacker.getsockname()[1]}"), bearer(a_key))
    with SchedulerClient(stack.address("scheduler"), api_key=a_key, timeout=30) as tenant_a:
        events: list[job_pb2.JobEvent] = []
        job = tenant_a.wait(tenant_a.submit_job(rl()).job_id, events.append)
        assert job.state == job_pb2.Job.STATE_SUCCEEDED, job.status_message
    saved = [e.checkpoint.checkpoint_id for e in events if e.WhichOneof("payload") == "checkpoint"]
    assert saved, "A's job saved no checkpoint"
    yield World(stack=stack, a_key=a_key, b_key=b_key, a_checkpoint=saved[-1], attacker=attacker, outside=outside)
    attacker.close()


def test_the_table_has_a_row_for_every_path_and_address_field_of_every_request() -> None:
    fields = every_hostile_field()
    assert set(ROWS) == set(fields), "add a row for each new path- or address-like field (drop removed ones)"
    assert {"SchedulerService.SubmitJob spec.inference.output_path", "SchedulerService.RegisterWorker address",
            "RolloutService.RunEpisodes coordinator_address", "TrainerService.SaveCheckpoint name"} <= set(fields)
    for key, row in ROWS.items():
        assert (row.spec is not None) == key.startswith(SUBMIT), key


@dataclass(frozen=True)
class Answered:
    code: grpc.StatusCode
    details: str
    reason: str


def answered(world: World, key: str, value: str, *, validate_only: bool = False) -> Answered:
    """Tenant B's call of the row's RPC with `value` in the row's field."""
    rpc, path = key.split(" ", 1)
    service, method = rpc.split(".")
    process, full_name = SERVICES[service]
    request = request_for(ROWS[key], method_descriptor(f"{full_name}/{method}"), validate_only)
    put(request, path, value)
    with grpc.insecure_channel(world.stack.address(process)) as channel:
        try:
            call(channel, f"{full_name}/{method}", request, bearer(world.b_key))
        except grpc.RpcError as error:
            reason = dict(error.trailing_metadata() or ()).get(REASON_METADATA_KEY, "")
            return Answered(error.code(), error.details() or "", reason)
    return Answered(C.OK, "", "")


def request_for(row: Row, method, validate_only: bool) -> Message:  # noqa: ANN001
    if row.spec is not None:
        return pb.SubmitJobRequest(spec=job_spec_from_dict(row.spec()), validate_only=validate_only)
    return message_factory.GetMessageClass(method.input_type)()


def test_a_tenant_key_gets_each_rows_answer_for_hostile_values(world: World) -> None:
    fields = every_hostile_field()
    wrong = []
    for key, row in ROWS.items():
        if row.answer is Answer.OWN_ENVHOSTS_ONLY:
            continue  # the next test
        code, reason, names_field = row.answer.value
        path = key.split(" ", 1)[1]
        for value in world.hostile_values(fields[key], key):
            for validate_only in ((False, True) if row.spec else (False,)):
                got = answered(world, key, value, validate_only=validate_only)
                named = got.details.startswith(field_in_details(path))
                if got.code != code or reason not in (None, got.reason) or (names_field and not named):
                    wrong.append(f"{key} = {value!r} (validate_only={validate_only}): {got}")
                elif row.answer in (Answer.CHECKPOINT_NOT_FOUND, Answer.ENVHOST_NOT_FOUND):
                    unknown = world.unknown_value(fields[key])
                    other = answered(world, key, unknown, validate_only=validate_only)
                    if other.details.replace(unknown, value) != got.details or other.code != got.code:
                        wrong.append(f"{key}: {value!r} answered unlike an unknown one: {got} vs {other}")
    assert wrong == [], "\n".join(wrong)


def test_a_tenants_registered_address_serves_only_its_own_jobs(world: World) -> None:
    key = "SchedulerService.RegisterWorker address"
    scheduler = "opentinker.scheduler.v1.SchedulerService/"
    with grpc.insecure_channel(world.stack.address("scheduler")) as channel:
        def register(tenant_key: str, worker_id: str, role: int, name: str = "") -> grpc.StatusCode:
            request = pb.RegisterWorkerRequest(worker_id=worker_id, role=role, name=name)
            put(request, key.split(" ", 1)[1], world.attacker_address)
            try:
                call(channel, scheduler + "RegisterWorker", request, bearer(tenant_key))
            except grpc.RpcError as error:
                return error.code()
            return C.OK

        assert register(world.b_key, "beta-spy", resources_pb2.ROLE_ENVHOST, "beta-spy") is C.OK
        assert register(world.b_key, "beta-trainer", resources_pb2.ROLE_TRAINER) is C.PERMISSION_DENIED
        assert register(world.b_key, A_ENVHOST_ID, resources_pb2.ROLE_ENVHOST, A_ENVHOST) is C.PERMISSION_DENIED
        a_sees = call(channel, scheduler + "ListWorkers", pb.ListWorkersRequest(), bearer(world.a_key)).workers
        assert [(w.worker_id, w.name) for w in a_sees] == [(A_ENVHOST_ID, A_ENVHOST)]  # still A's, not B's
        b_sees = call(channel, scheduler + "ListWorkers", pb.ListWorkersRequest(), bearer(world.b_key)).workers
        assert [w.worker_id for w in b_sees] == ["beta-spy"]
        a_spec = job_spec_from_dict({**rl(), "environment": {"env_name": "math", "envhost": "beta-spy"}})
        with pytest.raises(grpc.RpcError) as refused:
            call(channel, scheduler + "SubmitJob", pb.SubmitJobRequest(spec=a_spec, validate_only=True),
                 bearer(world.a_key))
    assert refused.value.code() is C.INVALID_ARGUMENT
    assert "no EnvHost 'beta-spy' is registered for your tenant" in refused.value.details()

def test_nothing_was_reached(world: World) -> None:
    """Run last: the refused calls created no file and made no connection."""
    time.sleep(0.5)  # a call the stack made anyway would have connected by now
    with pytest.raises(BlockingIOError):
        world.attacker.accept()
    assert sorted(p.name for p in world.outside.iterdir()) == ["server-secret.jsonl"]
    a_outputs = world.stack.state_dir / "tenants" / A_TENANT / "outputs"
    assert not a_outputs.exists() or list(a_outputs.iterdir()) == []
