"""Exact resume after kill -9 of a real Trainer process (CPU, fixed seeds).

Run A trains 6 steps straight. Run B trains 3 steps in a fresh Trainer process, runs past its
last checkpoint (a 4th step applied in memory only, then a ForwardBackward in flight) and is
SIGKILLed; a new Trainer process on the same checkpoint directory (the shared storage a
restarted worker finds) loads the step-3 TRAINING_STATE checkpoint, takes the data cursor it
returns and trains 3 more steps. The weights, the whole training state and the losses of
steps 4-6 must equal run A's bit for bit: weights, AdamW moments, the LR warmup, the dropout
RNG and the data cursor all come back. Negative control: resuming from a weights-only
checkpoint of the same step (same weights, fresh optimizer, step and RNG) ends elsewhere.

Each Trainer hosts a LoRA (dropout > 0) and a full-parameter session side by side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch
from safetensors.torch import load_file

from opentinker_api.common.v1 import algorithm_pb2 as algo_pb
from opentinker_api.common.v1 import datum_pb2, model_pb2, resources_pb2
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc
from opentinker_runtime.ml.checkpoints import TRAINING_STATE_FILE
from harness.stack import free_ports
from tests._services import SERVICES, ServiceProcess

pytestmark = pytest.mark.timeout(120)  # about 30 s on 2 idle cores, most of it 3 Trainer starts

TRAINER = next(case for case in SERVICES if case.name == "trainer")
KINDS = ("lora", "full")
ADAPTATIONS = {
    "lora": model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=4, alpha=8.0, dropout=0.2)),
    "full": model_pb2.Adaptation(full=model_pb2.FullAdaptation()),
}
# Warmup spans the resume point (rates 1/4 .. 4/4 of lr over steps 1-4), then the cosine
# decay over 8 steps: the resumed steps must continue the schedule where it was.
OPTIMIZER = algo_pb.OptimizerConfig(learning_rate=1e-2, weight_decay=0.01, max_grad_norm=1.0,
                                    warmup_steps=4, schedule=algo_pb.LR_SCHEDULE_COSINE,
                                    total_steps=8)
PPO = algo_pb.LossConfig(function=algo_pb.LOSS_FUNCTION_PPO_CLIP, clip_low=0.2, clip_high=0.28,
                         entropy_coef=0.01)
SEED = 7
MICRO_BATCH_TOKENS = 32  # several micro-batches per step: dropout draws in a fixed order
TOTAL_STEPS, KILLED_AFTER = 6, 3
START_TIMEOUT_S = 60.0  # two Trainers import torch side by side on 2 busy cores
WEIGHTS_ONLY = {"lora": pb.CHECKPOINT_FORMAT_PEFT_ADAPTER, "full": pb.CHECKPOINT_FORMAT_HF_MODEL}


# ---------------------------------------------------------------- the job's data source


def rl_datums(*, count: int, length: int, seed: int) -> list[datum_pb2.Datum]:
    """Random token sequences (lengths `length`, `length` - 1, ...) with advantages +-1 and
    made-up sampling logprobs, drawn from `seed` alone."""
    generator = torch.Generator().manual_seed(seed)
    datums = []
    for index in range(count):
        n = length - index
        datums.append(datum_pb2.Datum(
            tokens=torch.randint(0, 256, (n,), generator=generator).tolist(),
            loss_mask=[0.0, 0.0] + [1.0] * (n - 2), advantages=[1.0 if index % 2 else -1.0] * n,
            sampling_logprobs=[-5.5] * n))
    return datums


def batch_at(cursor: int) -> list[datum_pb2.Datum]:
    """Batch number `cursor` of the data source: a pure function of the cursor."""
    return rl_datums(count=4, length=16, seed=1000 + cursor)


def encode_cursor(cursor: int) -> bytes:
    return json.dumps({"next_batch": cursor}).encode()


def decode_cursor(data: bytes) -> int:
    return json.loads(data)["next_batch"]


# ---------------------------------------------------------------- driving a session


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """What one training step reported."""

    step: int
    loss: float
    grad_norm: float
    learning_rate: float
    checkpoint: pb.Checkpoint


@dataclass(kw_only=True)
class Run:
    """One session trained batch by batch from the data source."""

    stub: pb_grpc.TrainerServiceStub
    session_id: str
    lease: resources_pb2.LeaseContext
    cursor: int = 0
    records: list[StepRecord] = field(default_factory=list)


def open_run(stub: pb_grpc.TrainerServiceStub, kind: str, *, job: str, fencing_token: int) -> Run:
    lease = resources_pb2.LeaseContext(job_id=job, lease_id=f"lease-{fencing_token}",
                                       fencing_token=fencing_token)
    request = pb.CreateSessionRequest(
        lease=lease, adaptation=ADAPTATIONS[kind], optimizer=OPTIMIZER, seed=SEED,
        max_tokens_per_micro_batch=MICRO_BATCH_TOKENS,
        base_model=model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name="tiny-qwen2", seed=1)))
    return Run(stub=stub, session_id=stub.CreateSession(request).session.session_id, lease=lease)


def forward_backward(run: Run, datums: list[datum_pb2.Datum]) -> pb.ForwardBackwardResponse:
    return run.stub.ForwardBackward(pb.ForwardBackwardRequest(
        session_id=run.session_id, lease=run.lease, loss=PPO, datums=datums))


def train_step(run: Run) -> StepRecord:
    """ForwardBackward on the batch at the cursor, OptimStep, TRAINING_STATE with the next cursor."""
    fb = forward_backward(run, batch_at(run.cursor))
    step = run.stub.OptimStep(pb.OptimStepRequest(session_id=run.session_id, lease=run.lease))
    run.cursor += 1
    saved = save(run, pb.CHECKPOINT_FORMAT_TRAINING_STATE, data_cursor=encode_cursor(run.cursor))
    record = StepRecord(step=step.step, loss=fb.loss, grad_norm=step.grad_norm,
                        learning_rate=step.learning_rate, checkpoint=saved)
    run.records.append(record)
    return record


def save(run: Run, format: int, **fields: Any) -> pb.Checkpoint:
    return run.stub.SaveCheckpoint(pb.SaveCheckpointRequest(
        session_id=run.session_id, lease=run.lease, format=format, **fields)).checkpoint


def load(run: Run, checkpoint_id: str) -> pb.LoadCheckpointResponse:
    return run.stub.LoadCheckpoint(pb.LoadCheckpointRequest(
        session_id=run.session_id, lease=run.lease, checkpoint_id=checkpoint_id))


def policy_logprobs(run: Run, cursor: int) -> list[list[float]]:
    """Logprobs of batch `cursor` under the current weights (eval mode: no dropout)."""
    sequences = [datum_pb2.TokenSequence(tokens=d.tokens) for d in batch_at(cursor)]
    response = run.stub.ComputeLogprobs(pb.ComputeLogprobsRequest(session_id=run.session_id,
                                                                  sequences=sequences))
    return [list(row.logprobs) for row in response.logprobs]


def checkpoint_weights(checkpoint: pb.Checkpoint) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint's safetensors files (LoRA: the adapter; full: the model)."""
    files = sorted(Path(checkpoint.path).glob("*/*.safetensors"))
    assert files, f"no safetensors under {checkpoint.path}"
    return {f"{file.parent.name}/{name}": tensor
            for file in files for name, tensor in load_file(file).items()}


def training_state(checkpoint: pb.Checkpoint) -> dict[str, Any]:
    """training_state.pt: AdamW state, RNG state, step, policy version, data cursor."""
    return torch.load(Path(checkpoint.path) / TRAINING_STATE_FILE, map_location="cpu", weights_only=True)


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Paths at which two nested dicts/lists of tensors and scalars are not exactly equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"]
        return [d for key in a for d in differences(a[key], b[key], f"{where}.{key}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and torch.equal(a, b) else [where]
    return [] if type(a) is type(b) and a == b else [f"{where}: {a!r} != {b!r}"]


# ---------------------------------------------------------------- trainer processes


class Trainers:
    """Trainer subprocesses on free ports; every one still running is killed at the end."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.processes: list[ServiceProcess] = []
        self.channels: list[grpc.Channel] = []
        # A closed port: these Trainers must not register with a Scheduler someone else runs.
        self.nowhere = f"127.0.0.1:{free_ports(1)[0]}"

    def launch(self, name: str, checkpoint_dir: Path) -> ServiceProcess:
        """Start one (without waiting: launch several, then `stub` each)."""
        process = ServiceProcess(TRAINER, port=free_ports(1)[0], log_path=self.logs / f"{name}.log",
                                 OPENTINKER_CHECKPOINT_DIR=str(checkpoint_dir),
                                 OPENTINKER_TRAINER_DEVICE="cpu",
                                 OPENTINKER_TRAINER_SCHEDULER_ADDRESS=self.nowhere)
        self.processes.append(process)
        return process

    def stub(self, process: ServiceProcess) -> pb_grpc.TrainerServiceStub:
        process.wait_for_health("SERVING", service=TRAINER.full_name, timeout=START_TIMEOUT_S)
        channel = grpc.insecure_channel(process.address)
        self.channels.append(channel)
        return pb_grpc.TrainerServiceStub(channel)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        for process in self.processes:
            process.kill()


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """Runs A (straight), B (killed, resumed) and the weights-only control for one adaptation.
    Each record holds the TRAINING_STATE checkpoint its step wrote."""

    straight: list[StepRecord]
    loaded: pb.LoadCheckpointResponse
    resumed: list[StepRecord]
    resumed_logprobs: list[list[float]]
    control: list[StepRecord]
    control_logprobs: list[list[float]]


@dataclass(frozen=True, kw_only=True)
class Scenario:
    outcomes: dict[str, Outcome]
    killed_call: grpc.StatusCode


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    root = tmp_path_factory.mktemp("trainer-resume")
    trainers = Trainers(root)
    try:
        yield run_scenario(trainers, root)
    finally:
        trainers.close()


def run_scenario(trainers: Trainers, root: Path) -> Scenario:
    jobs = {kind: f"job-resume-{kind}" for kind in KINDS}
    trainer_a = trainers.launch("a", root / "checkpoints-a")
    trainer_b = trainers.launch("b", root / "checkpoints-b")

    stub_a = trainers.stub(trainer_a)
    straight = {kind: open_run(stub_a, kind, job=jobs[kind], fencing_token=1) for kind in KINDS}
    for run in straight.values():
        for _ in range(TOTAL_STEPS):
            train_step(run)

    stub_b = trainers.stub(trainer_b)
    doomed = {kind: open_run(stub_b, kind, job=jobs[kind], fencing_token=1) for kind in KINDS}
    weights_only_ids = {}
    for kind, run in doomed.items():
        for _ in range(KILLED_AFTER):
            train_step(run)
        weights_only_ids[kind] = save(run, WEIGHTS_ONLY[kind], name="weights-only").checkpoint_id
        forward_backward(run, batch_at(run.cursor))  # a 4th step, never checkpointed
        run.stub.OptimStep(pb.OptimStepRequest(session_id=run.session_id, lease=run.lease))
    killed_call = kill_during_forward_backward(trainer_b, doomed["lora"])

    stub_b2 = trainers.stub(trainers.launch("b-restarted", root / "checkpoints-b"))
    outcomes = {kind: resume(stub_b2, kind, jobs[kind], straight[kind], weights_only_ids[kind])
                for kind in KINDS}
    return Scenario(outcomes=outcomes, killed_call=killed_call)


def kill_during_forward_backward(process: ServiceProcess, run: Run) -> grpc.StatusCode:
    """SIGKILL the Trainer while a big ForwardBackward runs; the code that call ended with."""
    big = rl_datums(count=64, length=500, seed=99)
    call = run.stub.ForwardBackward.future(pb.ForwardBackwardRequest(
        session_id=run.session_id, lease=run.lease, loss=PPO, datums=big))
    time.sleep(0.5)
    assert not call.done(), "the ForwardBackward finished before the kill: make it bigger"
    process.kill()
    return call.exception().code()


def resume(stub: pb_grpc.TrainerServiceStub, kind: str, job: str, straight: Run,
           weights_only_id: str) -> Outcome:
    resumed = open_run(stub, kind, job=job, fencing_token=2)  # the job's next attempt
    loaded = load(resumed, f"{job}-step-{KILLED_AFTER}")
    resumed.cursor = decode_cursor(loaded.data_cursor)
    resumed_logprobs = policy_logprobs(resumed, resumed.cursor)
    while resumed.cursor < TOTAL_STEPS:
        train_step(resumed)

    control = open_run(stub, kind, job=f"{job}-control", fencing_token=1)
    assert load(control, weights_only_id).data_cursor == b""
    control.cursor = KILLED_AFTER
    control_logprobs = policy_logprobs(control, control.cursor)
    while control.cursor < TOTAL_STEPS:
        train_step(control)

    return Outcome(straight=straight.records, loaded=loaded, resumed=resumed.records,
                   resumed_logprobs=resumed_logprobs, control=control.records,
                   control_logprobs=control_logprobs)


# ---------------------------------------------------------------- the checks


def test_the_trainer_was_killed_in_the_middle_of_a_call(scenario: Scenario) -> None:
    assert scenario.killed_call == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("kind", KINDS)
def test_the_restarted_trainer_resumes_at_step_3_with_its_data_cursor(scenario: Scenario, kind: str) -> None:
    loaded = scenario.outcomes[kind].loaded
    assert decode_cursor(loaded.data_cursor) == KILLED_AFTER
    assert loaded.session.step == KILLED_AFTER and loaded.session.pending_datums == 0


@pytest.mark.parametrize("kind", KINDS)
def test_resumed_steps_report_what_the_straight_run_reported(scenario: Scenario, kind: str) -> None:
    outcome = scenario.outcomes[kind]
    assert [r.step for r in outcome.straight] == list(range(1, TOTAL_STEPS + 1))
    assert [r.step for r in outcome.resumed] == list(range(KILLED_AFTER + 1, TOTAL_STEPS + 1))
    later = outcome.straight[KILLED_AFTER:]
    assert [r.loss for r in outcome.resumed] == [r.loss for r in later]
    assert [r.grad_norm for r in outcome.resumed] == [r.grad_norm for r in later]
    assert [r.learning_rate for r in outcome.resumed] == [r.learning_rate for r in later]
    # warmup 1/4 .. 4/4 of lr over steps 1-4 (across the resume), then the cosine decays
    rates = [r.learning_rate for r in outcome.straight]
    assert rates[0] < rates[1] < rates[2] < rates[3] == rates[4] == max(rates) > rates[5] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_resumed_weights_equal_the_straight_run_bit_for_bit(scenario: Scenario, kind: str) -> None:
    outcome = scenario.outcomes[kind]
    straight = checkpoint_weights(outcome.straight[-1].checkpoint)
    resumed = checkpoint_weights(outcome.resumed[-1].checkpoint)
    assert resumed.keys() == straight.keys()
    assert all(("lora_" in name) == (kind == "lora") for name in straight)
    assert differences(straight, resumed) == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_step_6_training_states_are_identical(scenario: Scenario, kind: str) -> None:
    """AdamW moments, RNG state, step and cursor; only the policy version counts the load."""
    outcome = scenario.outcomes[kind]
    straight = training_state(outcome.straight[-1].checkpoint)
    resumed = training_state(outcome.resumed[-1].checkpoint)
    assert (straight.pop("policy_version"), resumed.pop("policy_version")) == (6, 7)
    assert differences(straight, resumed) == []
    assert decode_cursor(bytes.fromhex(resumed["data_cursor_hex"])) == TOTAL_STEPS


@pytest.mark.parametrize("kind", KINDS)
def test_resuming_from_weights_alone_is_not_exact(scenario: Scenario, kind: str) -> None:
    """Same weights at step 3 (same logprobs), but without the training state the runs part."""
    outcome = scenario.outcomes[kind]
    assert outcome.control_logprobs == outcome.resumed_logprobs
    if kind == "full":  # no dropout: the first step's loss still agrees, the update does not
        assert outcome.control[0].loss == outcome.straight[KILLED_AFTER].loss
    straight = checkpoint_weights(outcome.straight[-1].checkpoint)
    control = checkpoint_weights(outcome.control[-1].checkpoint)
    assert control.keys() == straight.keys()
    assert differences(straight, control), "resuming without the training state matched too"
