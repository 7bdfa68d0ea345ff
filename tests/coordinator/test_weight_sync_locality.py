"""Weight sync by locality: a real Trainer and a real Rollout (in-process gRPC servers on real
sockets) and the Coordinator's relay, `RemoteWeightSync`.

On one host (both configured with the same shared-memory directory) the weights move through one
file and only the header travels; when the Rollout cannot see the Trainer's files (another
directory = another host, or none at all) the relay falls back to the chunk stream. Either way
the Rollout ends with the Trainer's tensors bit for bit, generates what a policy loaded directly
from those weights generates, and no file is left behind.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import grpc
import torch

from opentinker_api.common.v1 import (
    algorithm_pb2, datum_pb2, environment_pb2, model_pb2, resources_pb2, sampling_pb2, weights_pb2,
)
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.scheduler.v1 import job_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker_runtime.core.server import start_server, stop_server
from opentinker_runtime.jobplan import PolicyPlan, resolve_job_plan
from opentinker_runtime.ml.models import merged_copy, save_model_dir
from opentinker_runtime.ml.weights import lora_state_dict
from opentinker_coordinator.adapters.remote import (
    RemoteRollout, RemoteTrainer, RemoteWeightSync, RolloutPolicy, TrainerSession,
)
from opentinker_rollout.main import build_plan as rollout_plan
from opentinker_rollout.settings import RolloutSettings
from opentinker_trainer.main import build_plan as trainer_plan
from opentinker_trainer.settings import TrainerSettings

MODEL = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-llama", seed=0))
LEASE = resources_pb2.LeaseContext(job_id="job-sync", lease_id="l1", fencing_token=1)
GREEDY = sampling_pb2.SamplingParams(max_new_tokens=12, temperature=0.0)
PROMPT = rollout_pb.Prompt(tokens={"tokens": list(range(30, 50))})


def policy_of(lora: bool) -> PolicyPlan:
    """The policy of an RL job's resolved plan."""
    adaptation = (model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0)) if lora
                  else model_pb2.Adaptation(full=model_pb2.FullAdaptation()))
    policy = job_pb2.AgentSpec(model=MODEL, adaptation=adaptation,
                               algorithm=algorithm_pb2.Algorithm(
                                   optimizer=algorithm_pb2.OptimizerConfig(learning_rate=5e-2)))
    spec = job_pb2.JobSpec(type=job_pb2.JOB_TYPE_RL, policy=policy,
                           environment=environment_pb2.EnvironmentReference(env_name="math"),
                           training=job_pb2.TrainingConfig(total_steps=1, batch_size=1, group_size=1))
    return resolve_job_plan(spec).policy


class Stack:
    """The two servers, the relay's two sides, and the in-process registries to compare."""

    def __init__(self, trainer, rollout, trainer_registry, rollout_registry, shared_dir: Path) -> None:
        self.trainer, self.rollout = trainer, rollout
        self.trainer_registry, self.rollout_registry = trainer_registry, rollout_registry
        self.shared_dir = shared_dir
        self.exports: list[int] = []
        """The transport of every ExportWeights call the relay made."""
        self.corrupt_next_file = False
        """Flip a byte of the next shared file once the Trainer wrote it (before the Rollout reads)."""
        original = trainer.stub.ExportWeights

        def recording(request, **kwargs):
            self.exports.append(request.transport)
            call = original(request, **kwargs)
            if not self.corrupt_next_file:
                return call
            self.corrupt_next_file = False
            return self._corrupting(call)

        trainer.stub.ExportWeights = recording

    async def _corrupting(self, call):
        async for item in call:
            if item.HasField("header") and item.header.HasField("shared_file"):
                with open(self.shared_dir / item.header.shared_file.name, "r+b") as f:
                    f.seek(-1, 2)
                    last = f.read(1)
                    f.seek(-1, 2)
                    f.write(bytes([last[0] ^ 0xFF]))
            yield item

    async def train_one_step(self, step: int = 1) -> None:
        """One cross-entropy step with a large learning rate: the weights leave their seed."""
        datum = datum_pb2.Datum(tokens=list(range(60, 80)), loss_mask=[0.0] * 4 + [1.0] * 16)
        loss = algorithm_pb2.LossConfig(function=algorithm_pb2.LOSS_FUNCTION_CROSS_ENTROPY)
        stub, sid = self.trainer.stub, self.trainer.session_id
        await stub.ForwardBackward(trainer_pb.ForwardBackwardRequest(session_id=sid, lease=LEASE, datums=[datum],
                                                                     loss=loss))
        await stub.OptimStep(trainer_pb.OptimStepRequest(session_id=sid, lease=LEASE, request_id=f"step-{step}"))

    async def trainer_tensors(self, lora: bool) -> dict[str, torch.Tensor]:
        def snapshot(session):
            source = lora_state_dict(session.model) if lora else merged_copy(session.model).state_dict()
            return {name: tensor.detach().clone() for name, tensor in source.items()}
        return await self.trainer_registry.run(self.trainer.session_id, None, snapshot)

    def rollout_tensors(self, lora: bool) -> dict[str, torch.Tensor]:
        policy = self.rollout_registry.get(self.rollout.policy_id)
        return lora_state_dict(policy.model, policy.adapter) if lora else dict(policy.model.state_dict())

    def files(self) -> list[Path]:
        return sorted(path for path in self.shared_dir.rglob("*") if path.is_file())

    async def greedy(self, policy_id: str) -> list[int]:
        response = await self.rollout.stub.Sample(rollout_pb.SampleRequest(
            policy_id=policy_id, prompts=[PROMPT], sampling=GREEDY))
        return list(response.results[0].completions[0].tokens)


@asynccontextmanager
async def stack(tmp_path: Path, *, lora: bool, rollout_shared_dir: str | None = None):
    """Trainer and Rollout sharing `tmp_path/shm`, unless `rollout_shared_dir` says otherwise."""
    shared = tmp_path / "shm"
    trainer_settings = TrainerSettings(auth="disabled", port=0, checkpoint_dir=tmp_path / "ckpt", device="cpu",
                                       shared_weights_dir=str(shared))
    rollout_settings = RolloutSettings(
        auth="disabled", port=0, checkpoint_dir=tmp_path / "ckpt",
        shared_weights_dir=str(shared) if rollout_shared_dir is None else rollout_shared_dir)
    async with AsyncExitStack() as exits:
        servers = []
        for settings, build in ((trainer_settings, trainer_plan), (rollout_settings, rollout_plan)):
            plan = await build(settings)
            server = await start_server(settings, plan)
            exits.push_async_callback(_stop, server, plan)
            servers.append((server, plan))
        (trainer_server, tplan), (rollout_server, rplan) = servers
        trainer_channel = await exits.enter_async_context(grpc.aio.insecure_channel(f"127.0.0.1:{trainer_server.port}"))
        rollout_channel = await exits.enter_async_context(grpc.aio.insecure_channel(f"127.0.0.1:{rollout_server.port}"))
        policy = policy_of(lora)
        trainer = RemoteTrainer(trainer_channel, TrainerSession(request_prefix=LEASE.job_id, policy=policy, seed=0,
                                                                max_tokens_per_micro_batch=0), LEASE)
        rollout = RemoteRollout(rollout_channel, RolloutPolicy(request_prefix=LEASE.job_id, policy=policy), LEASE)
        await trainer.open()
        await rollout.open()
        yield Stack(trainer, rollout, tplan.services[0].servicer.trainer.registry, rplan.services[0].servicer.rollout.registry,
                    shared)


async def _stop(server, plan) -> None:
    await stop_server(server, grace_seconds=1)
    for hook in plan.close_hooks:
        await hook()


def test_same_host_full_weights_move_through_shared_memory_bit_identical(tmp_path) -> None:
    async def scenario():
        async with stack(tmp_path, lora=False) as s:
            await s.train_one_step()
            version = await RemoteWeightSync(s.trainer, s.rollout).sync()
            expected, received = await s.trainer_tensors(lora=False), s.rollout_tensors(lora=False)
            files_after = s.files()
            model_dir = await s.trainer_registry.run(s.trainer.session_id, None, lambda session: save_model_dir(
                session.model, session.tokenizer, tmp_path / "direct"))
            direct = await s.rollout.stub.LoadModel(rollout_pb.LoadModelRequest(
                lease=LEASE, model=model_pb2.ModelReference(local=model_pb2.LocalModel(path=str(model_dir)))))
            after, from_dir = await s.greedy(s.rollout.policy_id), await s.greedy(direct.policy.policy_id)
            base = await s.rollout.stub.LoadModel(rollout_pb.LoadModelRequest(lease=LEASE, model=MODEL))
            before = await s.greedy(base.policy.policy_id)
            return version, s.exports, expected, received, files_after, after, from_dir, before, s.files()

    version, exports, expected, received, files_after, after, from_dir, before, files_at_end = asyncio.run(scenario())
    assert version == 1
    assert exports == [weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY]  # no stream was needed
    assert expected.keys() == received.keys()
    assert all(torch.equal(expected[name], received[name]) for name in expected)
    assert files_after == [] and files_at_end == []  # read once, then deleted
    assert after == from_dir  # generation equals that of the same weights loaded directly
    assert after != before  # and the step did change what the policy generates


def test_a_lora_job_moves_only_the_adapter_through_shared_memory(tmp_path) -> None:
    async def scenario():
        async with stack(tmp_path, lora=True) as s:
            await s.train_one_step()
            header = await _first_header(s)
            version = await RemoteWeightSync(s.trainer, s.rollout).sync()
            return header, version, s.exports, await s.trainer_tensors(lora=True), s.rollout_tensors(lora=True), s.files()

    header, version, exports, expected, received, files = asyncio.run(scenario())
    assert header.format == weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER
    assert header.total_bytes == sum(t.numel() * t.element_size() for t in expected.values())
    assert all("lora_" in spec.name for spec in header.tensors)
    assert version == 1 and exports == [weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY]
    assert expected.keys() == received.keys()
    assert all(torch.equal(expected[name], received[name]) for name in expected)
    assert files == []


async def _first_header(s: Stack) -> weights_pb2.WeightsHeader:
    """What the relay will forward (an ExportWeights of its own, its file removed by the next)."""
    items = [item async for item in s.trainer.stub.ExportWeights(trainer_pb.ExportWeightsRequest(
        session_id=s.trainer.session_id, transport=weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY))]
    s.exports.clear()
    assert len(items) == 1 and items[0].header.HasField("shared_file")
    return items[0].header


def test_a_rollout_on_another_host_gets_the_stream_and_later_syncs_skip_shared_memory(tmp_path) -> None:
    other_host = tmp_path / "other-host-shm"  # the Rollout's directory does not hold the Trainer's files
    other_host.mkdir()

    async def scenario():
        async with stack(tmp_path, lora=False, rollout_shared_dir=str(other_host)) as s:
            sync = RemoteWeightSync(s.trainer, s.rollout)
            await s.train_one_step()
            first = await sync.sync()
            identical = await _identical(s)
            await s.train_one_step(2)
            second = await sync.sync()
            identical = identical and await _identical(s)
            return first, second, identical, s.exports, sync.shared_memory, s.files()

    first, second, identical, exports, shared_memory, files = asyncio.run(scenario())
    assert (first, second) == (1, 2) and identical
    stream, shm = weights_pb2.WEIGHTS_TRANSPORT_STREAM, weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY
    assert exports == [shm, stream, stream] and shared_memory is False
    assert files == []  # the unread file went with the session's next export


def test_a_rollout_with_shared_memory_off_gets_the_stream(tmp_path) -> None:
    async def scenario():
        async with stack(tmp_path, lora=True, rollout_shared_dir="") as s:
            await s.train_one_step()
            version = await RemoteWeightSync(s.trainer, s.rollout).sync()
            return version, await _identical(s, lora=True), s.exports

    version, identical, exports = asyncio.run(scenario())
    assert version == 1 and identical
    assert exports == [weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY, weights_pb2.WEIGHTS_TRANSPORT_STREAM]


async def _identical(s: Stack, lora: bool = False) -> bool:
    expected, received = await s.trainer_tensors(lora), s.rollout_tensors(lora)
    return expected.keys() == received.keys() and all(torch.equal(expected[n], received[n]) for n in expected)


def test_a_corrupt_shared_file_is_refused_and_the_relay_sends_the_stream_instead(tmp_path) -> None:
    async def scenario():
        async with stack(tmp_path, lora=False) as s:
            await s.train_one_step()
            s.corrupt_next_file = True
            sync = RemoteWeightSync(s.trainer, s.rollout)
            version = await sync.sync()
            return version, s.exports, await _identical(s), sync.shared_memory, s.files()

    version, exports, identical, shared_memory, files = asyncio.run(scenario())
    assert version == 1 and identical
    assert exports == [weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY, weights_pb2.WEIGHTS_TRANSPORT_STREAM]
    assert shared_memory is True  # a corrupt file is no sign of another host: the next sync tries again
    assert files == []  # the Rollout deleted the corrupt file it refused
