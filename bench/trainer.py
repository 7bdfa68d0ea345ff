"""Trainer throughput: ForwardBackward + OptimStep and ExportWeights through gRPC vs in-process;
the Trainer's memory in a LoRA RL step on a ~30M-parameter model.

    .venv/bin/python bench/trainer.py            # 7 step rounds, ~30M-parameter export model, 3 memory steps (~3 min on 2 cores)
    .venv/bin/python bench/trainer.py --quick    # 2 rounds, ~5M-parameter export model, 2 memory steps: a smoke run (~1.5 min)
    .venv/bin/python bench/trainer.py --memory-only   # only the memory section (~1.5 min; --quick: ~45 s)

What runs, all on this machine:

* the Trainer as a real process (`python -m opentinker_trainer`, OPENTINKER_AUTH=disabled,
  device cpu; its scheduler address points at a free port, so it registers nowhere). This
  process talks to it over a real socket with the generated (synchronous) stubs.
* the in-process baseline: `TrainingSession`s built in this process with `create_session` from
  the very `CreateSessionRequest` sent to the server (`convert.session_spec`), fed the very
  datums of the `ForwardBackwardRequest` (`convert.datum`, converted once, untimed).

Step throughput (target: gRPC >= 0.90 x in-process): builtin `--model` (tiny-llama, ~0.9M
parameters) with a LoRA adapter (`--lora-rank`, all linear layers) and with full-parameter
training. One step is ForwardBackward over `--sequences` random byte sequences of `--tokens`
tokens (the first `--prompt-tokens` masked out), PPO-clip loss (clip 0.2, token mean, no KL)
with advantages +-1 and sampling logprobs, then OptimStep (AdamW, lr 1e-4, grad-norm clip 1);
over gRPC the OptimStep carries a request_id, like the Coordinator's. Both sides start from the
same weights and take the same number of steps (their first losses are reported and must agree).
After `--warmup` untimed steps per side, each of `--rounds` rounds times `--steps` steps of
every side, the two sides of an adaptation back to back, the order rotating from round to round.

ExportWeights throughput: a Llama of ~30M parameters (hidden 512, 8 layers; ~5M with --quick)
built from a seed with the byte-level tokenizer and saved as a local model directory, the base of
two more sessions on each side: a LoRA adapter (`--lora-rank`, exported as
WEIGHTS_FORMAT_LORA_ADAPTER) and full parameters (WEIGHTS_FORMAT_FULL). Three targets:

* `shm` (same host; target >= 0.70 x safetensors): ExportWeights with transport SHARED_MEMORY
  (the Trainer writes one safetensors file under its OPENTINKER_SHARED_WEIGHTS_DIR, here a fresh
  directory in /dev/shm, and answers with the header only), then what the Rollout does with that
  header: `read_shared_weights` under the same directory (the path checks, size and nonce, the
  index against the header, the checksum over the data: XXH3-64 of each 8 MiB chunk, the
  chunks in 2 threads, tensors viewing the file's mapping, the file deleted). The Trainer hashes
  each chunk in a second thread while it writes it. The Rollout's copy into its model is not
  timed, as in `stream`.
* `stream` (across hosts; target >= 0.50): ExportWeights with transport STREAM (chunk_bytes
  `--chunk-bytes`, 0 = the server's 4 MiB - 64 KiB) drained and every chunk fed to a
  `WeightsAssembler` (which hashes the chunks as they arrive), whose `finish()` (the checksum's
  comparison, tensors) is timed too.
* `safetensors`: `safetensors.torch.save_file` of the same tensors (taken from the in-process twin
  session) to /dev/shm (/tmp without it), the file deleted untimed: the baseline.

The first export of each kind and transport is checked against the twin: same names, checksum,
and every tensor equal. Throughput is tensor bytes per second, over `--export-rounds` rounds run
like the step rounds.

The table shows medians over rounds; each ratio is the median over rounds of that round's ratio
(both sides measured back to back, so a drift in the machine's load hits both alike).

Torch runs `--threads` threads in the server and in this process (default 1). With torch's
default, one per core, a 2-core box that other work also loads makes every op wait at its thread
pool's barrier for a descheduled thread: in-process steps then took 2-14 s instead of 0.1-0.3 s
while the server's stayed near 0.2 s, so the ratio measured the scheduler, not the service.

Memory (target: the Trainer's step memory <= 2 x the estimate below): a Trainer process of its
own (so nothing else it holds counts), one LoRA session (`--lora-rank`) on the builtin
`--memory-model` (small-llama, ~30M parameters) created with max_tokens_per_micro_batch 0, i.e.
the Trainer's default budget. `--memory-steps` steps, each ForwardBackward over
`--memory-sequences` random sequences of `--memory-tokens` tokens (PPO-clip as above) + OptimStep.
The Trainer's step memory is the peak its OptimStep reports (`trainer/peak_memory_mb`: on the CPU
the process's peak resident set during the step's calls) less its resident set before the
session was created (the interpreter, torch, gRPC: no model's). The estimate, computed here:

* model: parameters x 4 bytes (float32, the LoRA adapter included);
* optimizer: trainable parameters x 12 bytes (AdamW's two moments and the gradient);
* one micro-batch: the largest micro-batch the reported budget makes (rows x longest row, as the
  Trainer plans them) x the float32 activations a Llama layer saves for its backward per token:
  two RMSNorms (input and normalised: 4 x hidden), q, k, v and rotary q, k (5 x hidden), the
  attention output and o_proj's input (2 x hidden), the MLP's gate, up, activation and product
  (4 x intermediate), over the layers; plus the head: logits, two log-softmaxes and the entropy's
  product (4 x vocabulary).

Also printed: the resident set after each step (freed memory handed back: it must not climb).

Results: a table on stdout, progress on stderr, JSON in bench/results/trainer.json (--out).
Exit status 1 when the run fails (the server died, a call failed, the exported weights differ);
a MISS against a target is printed but does not fail the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from envhost import BenchFailure, ServerProcess, clean_environment, cpu_seconds, free_port  # noqa: E402

from opentinker_runtime.core.memory import keep_freed_memory  # noqa: E402
from opentinker_api.common.v1 import algorithm_pb2, datum_pb2, model_pb2, resources_pb2, weights_pb2  # noqa: E402
from opentinker_api.trainer.v1 import trainer_service_pb2 as pb  # noqa: E402
from opentinker_api.trainer.v1 import trainer_service_pb2_grpc as pb_grpc  # noqa: E402
from opentinker_runtime.ml.models import BUILTIN_MODELS, quiet_transformers, save_model_dir  # noqa: E402
from opentinker_runtime.ml.tokenizer import VOCAB_SIZE, build_byte_tokenizer  # noqa: E402
from opentinker_runtime.ml.shared_weights import read_shared_weights  # noqa: E402
from opentinker_runtime.ml.weights import WeightsAssembler, lora_state_dict  # noqa: E402
from opentinker_rollout.convert import weights_header  # noqa: E402 - as the Rollout receives weights
from opentinker_trainer import convert  # noqa: E402
from opentinker_trainer.batching import plan_micro_batches  # noqa: E402
from opentinker_trainer.export import export_weights  # noqa: E402
from opentinker_trainer.session import TrainingSession  # noqa: E402
from opentinker_trainer.session_factory import create_session  # noqa: E402

LEASE = resources_pb2.LeaseContext(job_id="bench-trainer", lease_id="bench", fencing_token=1)
ADAPTATIONS = ("lora", "full")
STEP_TARGETS = ("grpc", "in-process")
EXPORT_TARGETS = ("shm", "stream", "safetensors")
TRANSPORTS = {"shm": weights_pb2.WEIGHTS_TRANSPORT_SHARED_MEMORY, "stream": weights_pb2.WEIGHTS_TRANSPORT_STREAM}
TARGET_RATIOS = {"grpc_over_inprocess_step_lora": 0.90, "grpc_over_inprocess_step_full": 0.90,
                 "export_over_safetensors_lora": 0.70, "export_over_safetensors_full": 0.70,
                 "stream_over_safetensors_lora": 0.50, "stream_over_safetensors_full": 0.50}
"""export_over_* is the same-host export (`shm`), stream_over_* the cross-host one (`stream`)."""
WEIGHTS_FORMATS = {"lora": weights_pb2.WEIGHTS_FORMAT_LORA_ADAPTER, "full": weights_pb2.WEIGHTS_FORMAT_FULL}
EXPORT_SIZES = {"full": {"hidden_size": 512, "intermediate_size": 1792, "num_hidden_layers": 8},
                "quick": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 6}}
"""Llama sizes of the export model: ~30.4M parameters, and ~5.1M with --quick."""
MEMORY_TARGET = 2.0
"""The Trainer's step memory over (model + optimizer + one micro-batch)."""
CALL_TIMEOUT_S = 300.0
START_TIMEOUT_S = 90.0


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    model: str
    sequences: int
    tokens: int
    prompt_tokens: int
    steps: int
    warmup: int
    rounds: int
    export_rounds: int
    lora_rank: int
    chunk_bytes: int
    threads: int
    export_sizes: dict[str, int]
    quick: bool
    out: Path
    memory_model: str = "small-llama"
    memory_sequences: int = 32
    memory_tokens: int = 128
    memory_steps: int = 3
    memory_budget: int = 0
    memory_only: bool = False


QUICK_DEFAULTS = {"steps": (10, 3), "warmup": (3, 2), "rounds": (7, 2), "export_rounds": (5, 2),
                  "memory_steps": (3, 2), "memory_sequences": (32, 20)}
"""(default, default with --quick) of the options that --quick shortens."""


def parse_args(argv: list[str] | None) -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama", help="builtin model of the step measurements")
    p.add_argument("--sequences", type=int, default=16, help="datums per ForwardBackward")
    p.add_argument("--tokens", type=int, default=64, help="tokens per datum")
    p.add_argument("--prompt-tokens", type=int, default=16, help="leading tokens of a datum with loss mask 0")
    p.add_argument("--steps", type=int, help="timed steps per side and round (default 10; 3 with --quick)")
    p.add_argument("--warmup", type=int, help="untimed steps per side first (default 3; 2 with --quick)")
    p.add_argument("--rounds", type=int, help="step rounds (default 7; 2 with --quick)")
    p.add_argument("--export-rounds", type=int, help="export rounds (default 5; 2 with --quick)")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--chunk-bytes", type=int, default=0,
                   help="ExportWeights chunk_bytes of the stream (0 = the server's 4 MiB - 64 KiB)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of the server (OMP_NUM_THREADS) and of the in-process sessions "
                        "(default 1; see the module docstring)")
    p.add_argument("--memory-model", default="small-llama", help="builtin model of the memory section")
    p.add_argument("--memory-sequences", type=int, help="datums per ForwardBackward of the memory section "
                   "(default 32; 20 with --quick)")
    p.add_argument("--memory-tokens", type=int, default=128, help="tokens per datum of the memory section")
    p.add_argument("--memory-steps", type=int, help="steps of the memory section (default 3; 2 with --quick)")
    p.add_argument("--memory-budget", type=int, default=0,
                   help="max_tokens_per_micro_batch of the memory section's session (0 = the Trainer's "
                        "default; 100000 = the whole batch at once, as before the default existed)")
    p.add_argument("--memory-only", action="store_true", help="run only the memory section")
    p.add_argument("--quick", action="store_true", help="fewer rounds and steps, a ~5M-parameter export model")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "trainer.json")
    a = p.parse_args(argv)
    counts = {name: getattr(a, name) if getattr(a, name) is not None else defaults[a.quick]
              for name, defaults in QUICK_DEFAULTS.items()}
    config = BenchConfig(
        model=a.model, sequences=a.sequences, tokens=a.tokens, prompt_tokens=a.prompt_tokens, **counts,
        lora_rank=a.lora_rank, chunk_bytes=a.chunk_bytes, threads=a.threads,
        export_sizes=EXPORT_SIZES["quick" if a.quick else "full"], quick=a.quick, out=a.out,
        memory_model=a.memory_model, memory_tokens=a.memory_tokens, memory_budget=a.memory_budget,
        memory_only=a.memory_only)
    if min(*counts.values(), config.threads) < 1:
        p.error("--steps, --warmup, --rounds, --export-rounds, --memory-steps, --memory-sequences and --threads "
                "must be >= 1")
    if not 0 <= config.prompt_tokens < config.tokens - 1:
        p.error("--prompt-tokens must leave at least two trained tokens")
    if not config.prompt_tokens < config.memory_tokens - 1:
        p.error("--memory-tokens must leave at least two trained tokens after --prompt-tokens")
    return config


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_note() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


# ---- requests: the same for the server and the in-process twins ------------------------------

def create_request(base: model_pb2.ModelReference, adaptation: str, lora_rank: int) -> pb.CreateSessionRequest:
    kind = (model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(rank=lora_rank, alpha=2.0 * lora_rank))
            if adaptation == "lora" else model_pb2.Adaptation(full=model_pb2.FullAdaptation()))
    return pb.CreateSessionRequest(
        lease=LEASE, base_model=base, adaptation=kind, seed=1,
        optimizer=algorithm_pb2.OptimizerConfig(learning_rate=1e-4, max_grad_norm=1.0))


def datum_messages(config: BenchConfig, sequences: int = 0, length: int = 0) -> list[datum_pb2.Datum]:
    """Random byte sequences; advantages +-1 by sequence; sampling logprobs near a uniform policy's
    (`sequences` x `length`, 0 = the step measurements')."""
    sequences, length = sequences or config.sequences, length or config.tokens
    generator = torch.Generator().manual_seed(0)
    datums = []
    for index in range(sequences):
        tokens = torch.randint(0, 256, (length,), generator=generator).tolist()
        logprobs = (-5.56 + 0.1 * torch.randn(length, generator=generator)).tolist()
        datums.append(datum_pb2.Datum(
            tokens=tokens, loss_mask=[0.0] * config.prompt_tokens + [1.0] * (length - config.prompt_tokens),
            advantages=[1.0 if index % 2 else -1.0] * length, sampling_logprobs=logprobs))
    return datums


PPO_CLIP = algorithm_pb2.LossConfig(function=algorithm_pb2.LOSS_FUNCTION_PPO_CLIP,
                                    aggregation=algorithm_pb2.LOSS_AGGREGATION_TOKEN_MEAN,
                                    clip_low=0.2, clip_high=0.2)


def twin(request: pb.CreateSessionRequest, name: str, checkpoint_root: Path) -> TrainingSession:
    """The in-process session the server would create for `request`."""
    return create_session(f"twin-{name}", convert.session_spec(request), checkpoint_root=checkpoint_root)


def export_model_dir(sizes: dict[str, int], directory: Path) -> tuple[Path, int]:
    """A seeded Llama with the byte-level tokenizer saved as an HF directory; (path, parameters)."""
    config = LlamaConfig(vocab_size=VOCAB_SIZE, pad_token_id=256, bos_token_id=257, eos_token_id=259,
                         tie_word_embeddings=True, max_position_embeddings=512, num_attention_heads=8,
                         num_key_value_heads=8, **sizes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    save_model_dir(model, build_byte_tokenizer(), directory)
    return directory, sum(p.numel() for p in model.parameters())


# ---- measurements -----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class StepRun:
    adaptation: str
    target: str
    round: int
    steps: int
    tokens: int
    seconds: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


@dataclass(frozen=True, kw_only=True)
class ExportRun:
    adaptation: str
    target: str
    round: int
    bytes: int
    seconds: float
    header_s: float = 0.0
    """shm/stream: from the call to its first message (the server's snapshot or file, checksum)."""
    stream_s: float = 0.0
    """stream: from the header to the last chunk added to the assembler (shm: ~0)."""
    finish_s: float = 0.0
    """stream: the assembler's finish(); shm: read_shared_weights (checks, checksum, tensors)."""
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds


class Sides:
    """The server's sessions (ids by adaptation) and their in-process twins, step and export."""

    def __init__(self, stub: pb_grpc.TrainerServiceStub, server: ServerProcess, config: BenchConfig,
                 shared_dir: Path) -> None:
        self.stub, self.server, self.config = stub, server, config
        self.shared_dir = shared_dir
        """The Trainer's OPENTINKER_SHARED_WEIGHTS_DIR, read here as a Rollout on this host would."""
        self.request = pb.ForwardBackwardRequest(lease=LEASE, datums=datum_messages(config), loss=PPO_CLIP)
        self.datums = [convert.datum(message) for message in self.request.datums]
        self.loss = convert.loss_config(PPO_CLIP)
        self.step_ids: dict[str, str] = {}
        self.step_twins: dict[str, TrainingSession] = {}
        self.export_ids: dict[str, str] = {}
        self.export_twins: dict[str, TrainingSession] = {}
        self.first_loss: dict[str, dict[str, float]] = {a: {} for a in ADAPTATIONS}
        self.optim_count = 0

    def open(self, export_dir: Path, checkpoint_root: Path) -> None:
        builtin = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=self.config.model, seed=0))
        local = model_pb2.ModelReference(local=model_pb2.LocalModel(path=str(export_dir)))
        for adaptation in ADAPTATIONS:
            for base, ids, twins in ((builtin, self.step_ids, self.step_twins),
                                     (local, self.export_ids, self.export_twins)):
                request = create_request(base, adaptation, self.config.lora_rank)
                ids[adaptation] = self.stub.CreateSession(request, timeout=CALL_TIMEOUT_S).session.session_id
                twins[adaptation] = twin(request, adaptation, checkpoint_root)

    # -- step

    def step_grpc(self, adaptation: str) -> float:
        session_id = self.step_ids[adaptation]
        self.request.session_id = session_id
        self.optim_count += 1
        loss = self.stub.ForwardBackward(self.request, timeout=CALL_TIMEOUT_S).loss
        self.stub.OptimStep(pb.OptimStepRequest(session_id=session_id, lease=LEASE,
                                                request_id=f"bench/optim/{self.optim_count}"),
                            timeout=CALL_TIMEOUT_S)
        return loss

    def step_in_process(self, adaptation: str) -> float:
        session = self.step_twins[adaptation]
        loss = session.forward_backward(self.datums, self.loss).loss
        session.optim_step()
        return loss

    def warm_up(self) -> None:
        for adaptation in ADAPTATIONS:
            for target, step in (("grpc", self.step_grpc), ("in-process", self.step_in_process)):
                losses = [step(adaptation) for _ in range(self.config.warmup)]
                self.first_loss[adaptation][target] = losses[0]

    def time_steps(self, adaptation: str, target: str, round_index: int) -> StepRun:
        step: Callable[[str], float] = self.step_grpc if target == "grpc" else self.step_in_process
        server_cpu, client_cpu = cpu_seconds(self.server.pid), time.process_time()
        started = time.perf_counter()
        for _ in range(self.config.steps):
            step(adaptation)
        seconds = time.perf_counter() - started
        return StepRun(adaptation=adaptation, target=target, round=round_index, steps=self.config.steps,
                       tokens=self.config.steps * self.config.sequences * self.config.tokens, seconds=seconds,
                       server_cpu_s=cpu_seconds(self.server.pid) - server_cpu,
                       client_cpu_s=time.process_time() - client_cpu)

    # -- export

    def expected_tensors(self, adaptation: str) -> dict[str, torch.Tensor]:
        """What ExportWeights of the twin's weights holds (tied tensors as separate copies)."""
        model = self.export_twins[adaptation].model
        source = lora_state_dict(model) if adaptation == "lora" else model.state_dict()
        return {name: tensor.detach().clone() for name, tensor in source.items()}

    def export_grpc(self, adaptation: str, target: str, round_index: int
                    ) -> tuple[ExportRun, pb.ExportWeightsResponse, dict[str, torch.Tensor]]:
        """One ExportWeights through `target` ("shm" or "stream"), received as the Rollout does."""
        request = pb.ExportWeightsRequest(session_id=self.export_ids[adaptation], format=WEIGHTS_FORMATS[adaptation],
                                          chunk_bytes=self.config.chunk_bytes, transport=TRANSPORTS[target])
        server_cpu, client_cpu = cpu_seconds(self.server.pid), time.process_time()
        started = time.perf_counter()
        stream = self.stub.ExportWeights(request, timeout=CALL_TIMEOUT_S)
        first = next(stream)
        header_at = time.perf_counter()
        if first.WhichOneof("item") != "header":
            raise BenchFailure(f"ExportWeights ({adaptation}) began with {first.WhichOneof('item')}, not a header")
        header = weights_header(first.header)
        if (header.shared_file is not None) != (target == "shm"):
            raise BenchFailure(f"ExportWeights ({adaptation}, {target}) answered "
                               f"{'a shared file' if header.shared_file else 'a stream'}")
        if header.shared_file is not None:
            if next(stream, None) is not None:
                raise BenchFailure(f"ExportWeights ({adaptation}) sent chunks after a shared-file header")
            streamed_at = time.perf_counter()
            tensors = read_shared_weights(self.shared_dir, header.shared_file, header.tensors,
                                          header.expected_checksum)
        else:
            assembler = WeightsAssembler(list(header.tensors), header.expected_checksum)
            for item in stream:
                assembler.add(item.chunk.tensor_name, item.chunk.offset, item.chunk.data)
            streamed_at = time.perf_counter()
            tensors = assembler.finish()
        done = time.perf_counter()
        run = ExportRun(adaptation=adaptation, target=target, round=round_index, bytes=header.total_bytes,
                        seconds=done - started, header_s=header_at - started, stream_s=streamed_at - header_at,
                        finish_s=done - streamed_at, server_cpu_s=cpu_seconds(self.server.pid) - server_cpu,
                        client_cpu_s=time.process_time() - client_cpu)
        return run, first, tensors

    @staticmethod
    def export_safetensors(adaptation: str, round_index: int, tensors: dict[str, torch.Tensor],
                           directory: Path) -> ExportRun:
        path = directory / f"bench-trainer-{os.getpid()}-{adaptation}.safetensors"
        client_cpu = time.process_time()
        started = time.perf_counter()
        save_file(tensors, str(path))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - client_cpu
        path.unlink()
        size = sum(t.numel() * t.element_size() for t in tensors.values())
        return ExportRun(adaptation=adaptation, target="safetensors", round=round_index, bytes=size,
                         seconds=seconds, client_cpu_s=cpu)


def verify_export(what: str, first: pb.ExportWeightsResponse, received: dict[str, torch.Tensor],
                  expected: dict[str, torch.Tensor], twin_session: TrainingSession) -> dict[str, Any]:
    """The exported weights are the twin's: same names, checksum and tensors; BenchFailure otherwise."""
    reference = export_weights(twin_session).package.checksum
    problems = []
    if list(received) != list(expected):
        problems.append(f"tensor names differ: {sorted(set(received) ^ set(expected))[:5]}")
    if first.header.checksum.hex_digest != reference.hex_digest:
        problems.append(f"checksum {first.header.checksum.hex_digest} != in-process {reference.hex_digest}")
    unequal = [name for name in expected if name in received and not torch.equal(received[name], expected[name])]
    if unequal:
        problems.append(f"tensors differ: {unequal[:5]}")
    if problems:
        raise BenchFailure(f"ExportWeights ({what}) differs from the in-process weights: "
                           f"{'; '.join(problems)}")
    return {"tensors": len(received), "bytes": first.header.total_bytes,
            "checksum": first.header.checksum.hex_digest, "equal": True}


def shm_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def run_steps(sides: Sides, config: BenchConfig) -> list[StepRun]:
    progress(f"warm-up: {config.warmup} step(s) per side and adaptation ...")
    sides.warm_up()
    runs: list[StepRun] = []
    for round_index in range(config.rounds):
        for adaptation in rotated(ADAPTATIONS, round_index):
            for target in rotated(STEP_TARGETS, round_index):
                run = sides.time_steps(adaptation, target, round_index)
                progress(f"round {round_index + 1} step {adaptation:4s} {target:10s} "
                         f"{run.steps / run.seconds:6.2f} steps/s {run.tokens_per_s:9.0f} tokens/s")
                runs.append(run)
    return runs


def rotated(names: tuple[str, ...], shift: int) -> tuple[str, ...]:
    shift %= len(names)
    return names[shift:] + names[:shift]


def run_exports(sides: Sides, config: BenchConfig) -> tuple[list[ExportRun], dict[str, Any]]:
    directory = shm_dir()
    expected = {adaptation: sides.expected_tensors(adaptation) for adaptation in ADAPTATIONS}
    verified: dict[str, Any] = {}
    runs: list[ExportRun] = []
    for adaptation in ADAPTATIONS:  # warm-up, and the one check per transport against the in-process weights
        checks = []
        for transport in TRANSPORTS:
            _, first, received = sides.export_grpc(adaptation, transport, -1)
            checks.append(verify_export(f"{adaptation}, {transport}", first, received, expected[adaptation],
                                        sides.export_twins[adaptation]))
            del received
        verified[adaptation] = {**checks[0], "transports": list(TRANSPORTS)}
        sides.export_safetensors(adaptation, -1, expected[adaptation], directory)
    for round_index in range(config.export_rounds):
        for adaptation in rotated(ADAPTATIONS, round_index):
            for target in rotated(EXPORT_TARGETS, round_index):
                run = (sides.export_grpc(adaptation, target, round_index)[0] if target in TRANSPORTS
                       else sides.export_safetensors(adaptation, round_index, expected[adaptation], directory))
                progress(f"round {round_index + 1} export {adaptation:4s} {target:11s} "
                         f"{run.bytes_per_s / 1e6:8.1f} MB/s ({run.bytes / 1e6:.1f} MB "
                         f"in {run.seconds * 1e3:.0f} ms)")
                runs.append(run)
    return runs, verified


# ---- memory -----------------------------------------------------------------------------------

PEAK_MEMORY, MICRO_BATCH_TOKENS = "trainer/peak_memory_mb", "trainer/micro_batch_tokens"
MB = 1024 * 1024


def resident_mb(pid: int) -> float:
    """The resident set of process `pid` now, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchFailure(f"no VmRSS in /proc/{pid}/status")


def saved_activation_bytes_per_token(model_name: str) -> int:
    """Float32 bytes a Llama saves for its backward per token (see the module docstring)."""
    config = BUILTIN_MODELS[model_name].config()
    hidden, intermediate = config.hidden_size, config.intermediate_size
    layer = (4 + 5 + 2) * hidden + 4 * intermediate
    return 4 * (config.num_hidden_layers * layer + 4 * config.vocab_size)


def memory_estimate(config: BenchConfig, info: Any, budget: int) -> dict[str, float]:
    """Model + optimizer + the largest micro-batch's activations, as the module docstring says."""
    lengths = [config.memory_tokens] * config.memory_sequences
    plan = plan_micro_batches(lengths, budget)
    largest = max(len(rows) * max(lengths[i] for i in rows) for rows in plan)
    parts = {"model_mb": info.parameter_count * 4 / MB, "optimizer_mb": info.trainable_parameter_count * 12 / MB,
             "micro_batch_mb": largest * saved_activation_bytes_per_token(config.memory_model) / MB}
    return {**parts, "estimate_mb": sum(parts.values()), "micro_batches": len(plan),
            "largest_micro_batch_tokens": largest}


def memory_step(stub: pb_grpc.TrainerServiceStub, request: pb.ForwardBackwardRequest, index: int,
                server: ServerProcess) -> dict[str, float]:
    started = time.perf_counter()
    fb = stub.ForwardBackward(request, timeout=CALL_TIMEOUT_S)
    optim = stub.OptimStep(pb.OptimStepRequest(session_id=request.session_id, lease=LEASE,
                                               request_id=f"bench/memory/{index}"), timeout=CALL_TIMEOUT_S)
    return {"seconds": time.perf_counter() - started, "loss": fb.loss, "budget": fb.metrics[MICRO_BATCH_TOKENS],
            "forward_backward_peak_mb": fb.metrics[PEAK_MEMORY], "step_peak_mb": optim.metrics[PEAK_MEMORY],
            "resident_after_mb": resident_mb(server.pid)}


def run_memory(config: BenchConfig, tmp_path: Path, shared_dir: Path) -> dict[str, Any]:
    """The memory section on a Trainer process of its own (module docstring)."""
    server = trainer_process(tmp_path, config, shared_dir)
    try:
        progress(f"memory: starting a Trainer; a LoRA session on {config.memory_model} with the default budget ...")
        server.start()
        server.wait_serving(START_TIMEOUT_S)
        idle_mb = resident_mb(server.pid)
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.TrainerServiceStub(channel)
            base = model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=config.memory_model, seed=0))
            create = create_request(base, "lora", config.lora_rank)
            create.max_tokens_per_micro_batch = config.memory_budget
            session = stub.CreateSession(create, timeout=CALL_TIMEOUT_S).session
            session_mb = resident_mb(server.pid)
            request = pb.ForwardBackwardRequest(session_id=session.session_id, lease=LEASE, loss=PPO_CLIP,
                                                datums=datum_messages(config, config.memory_sequences,
                                                                      config.memory_tokens))
            steps = []
            for index in range(config.memory_steps):
                steps.append(memory_step(stub, request, index, server))
                progress(f"memory step {index + 1}: {steps[-1]['seconds']:.1f} s, peak "
                         f"{steps[-1]['step_peak_mb']:.0f} MiB, resident after {steps[-1]['resident_after_mb']:.0f} MiB")
    except (BenchFailure, grpc.RpcError) as failure:
        raise BenchFailure(f"{failure}\ntrainer log:\n{server.log_tail()}") from failure
    finally:
        server.stop()
    estimate = memory_estimate(config, session.model_info, int(steps[0]["budget"]))
    peak_mb = max(step["step_peak_mb"] for step in steps)
    ratio = (peak_mb - idle_mb) / estimate["estimate_mb"]
    return {"model": config.memory_model, "parameters": session.model_info.parameter_count,
            "trainable": session.model_info.trainable_parameter_count, "sequences": config.memory_sequences,
            "tokens": config.memory_tokens, "budget": int(steps[0]["budget"]),
            "budget_source": "explicit" if config.memory_budget else "default", "idle_resident_mb": idle_mb,
            "session_resident_mb": session_mb, "peak_mb": peak_mb, "step_memory_mb": peak_mb - idle_mb,
            "estimate": estimate, "step_memory_over_estimate": ratio, "target": MEMORY_TARGET,
            "meets_target": ratio <= MEMORY_TARGET, "steps": steps}


def print_memory(memory: dict[str, Any]) -> None:
    estimate = memory["estimate"]
    print(f"\nTrainer memory: LoRA RL step (PPO-clip) on {memory['model']} ({memory['parameters']:,} parameters, "
          f"{memory['trainable']:,} trainable), {memory['sequences']} x {memory['tokens']} tokens, "
          f"{memory['budget_source']} micro-batch budget {memory['budget']} tokens ({estimate['micro_batches']} micro-batches)")
    print(f"  Trainer resident: idle {memory['idle_resident_mb']:.0f} MiB, with the session "
          f"{memory['session_resident_mb']:.0f} MiB, step peak {memory['peak_mb']:.0f} MiB; after each step "
          + ", ".join(f"{step['resident_after_mb']:.0f}" for step in memory["steps"]) + " MiB")
    print(f"  estimate: model {estimate['model_mb']:.1f} + optimizer {estimate['optimizer_mb']:.1f} + one "
          f"micro-batch ({estimate['largest_micro_batch_tokens']} tokens) {estimate['micro_batch_mb']:.1f} = "
          f"{estimate['estimate_mb']:.1f} MiB")
    verdict = "PASS" if memory["meets_target"] else "MISS"
    print(f"  step memory (peak - idle) {memory['step_memory_mb']:.0f} MiB = "
          f"{memory['step_memory_over_estimate']:.2f} x the estimate  target <= {memory['target']:.1f}: {verdict}")
    print("  seconds per step: " + ", ".join(f"{step['seconds']:.1f}" for step in memory["steps"]))


# ---- report -----------------------------------------------------------------------------------

def summarize(step_runs: list[StepRun], export_runs: list[ExportRun]) -> dict[str, Any]:
    median = statistics.median
    steps = {}
    for adaptation in ADAPTATIONS:
        for target in STEP_TARGETS:
            runs = [r for r in step_runs if r.adaptation == adaptation and r.target == target]
            steps.setdefault(adaptation, {})[target] = {
                "steps_per_s": median(r.steps / r.seconds for r in runs),
                "tokens_per_s": median(r.tokens_per_s for r in runs),
                "ms_per_step": median(1e3 * r.seconds / r.steps for r in runs),
                "server_cpu_ms_per_step": median(1e3 * r.server_cpu_s / r.steps for r in runs),
                "client_cpu_ms_per_step": median(1e3 * r.client_cpu_s / r.steps for r in runs)}
    exports = {}
    for adaptation in ADAPTATIONS:
        for target in EXPORT_TARGETS:
            runs = [r for r in export_runs if r.adaptation == adaptation and r.target == target]
            exports.setdefault(adaptation, {})[target] = {
                "bytes": runs[0].bytes, "bytes_per_s": median(r.bytes_per_s for r in runs),
                "ms": median(1e3 * r.seconds for r in runs), "header_ms": median(1e3 * r.header_s for r in runs),
                "stream_ms": median(1e3 * r.stream_s for r in runs),
                "finish_ms": median(1e3 * r.finish_s for r in runs),
                "server_cpu_ms": median(1e3 * r.server_cpu_s for r in runs),
                "client_cpu_ms": median(1e3 * r.client_cpu_s for r in runs)}
    return {"step": steps, "export": exports}


def ratios(step_runs: list[StepRun], export_runs: list[ExportRun]) -> dict[str, float]:
    """Per adaptation, the median over rounds of the round's throughput ratio (the two sides of
    a round run back to back, so a drift in the machine's load cancels out)."""
    steps = {f"grpc_over_inprocess_step_{a}": paired_ratio(step_runs, a, "grpc", "in-process")
             for a in ADAPTATIONS}
    exports = {f"export_over_safetensors_{a}": paired_ratio(export_runs, a, "shm", "safetensors")
               for a in ADAPTATIONS}
    exports |= {f"stream_over_safetensors_{a}": paired_ratio(export_runs, a, "stream", "safetensors")
                for a in ADAPTATIONS}
    return {**steps, **exports}


def paired_ratio(runs: list[StepRun] | list[ExportRun], adaptation: str, target: str, baseline: str) -> float:
    rate = {(r.target, r.round): r.tokens_per_s if isinstance(r, StepRun) else r.bytes_per_s
            for r in runs if r.adaptation == adaptation}
    rounds = sorted({round_index for _, round_index in rate})
    return statistics.median(rate[(target, i)] / rate[(baseline, i)] for i in rounds)


def print_report(results: dict[str, Any], config: BenchConfig) -> None:
    summary, models = results["summary"], results["models"]
    trained = config.tokens - config.prompt_tokens
    print(f"\nTrainer step: {config.model} ({models['step_parameters']:,} parameters), "
          f"{config.sequences} sequences x {config.tokens} tokens ({trained} trained), PPO-clip; "
          f"ForwardBackward + OptimStep, median of {config.rounds} rounds x {config.steps} steps, "
          f"{config.threads} torch thread(s) per process")
    print(f"{'adaptation':11s}{'target':12s}{'steps/s':>9s}{'tokens/s':>10s}{'ms/step':>9s}"
          f"{'server CPU ms':>15s}{'client CPU ms':>15s}")
    for adaptation, targets in summary["step"].items():
        for target, row in targets.items():
            print(f"{adaptation:11s}{target:12s}{row['steps_per_s']:9.2f}{row['tokens_per_s']:10.0f}"
                  f"{row['ms_per_step']:9.1f}{row['server_cpu_ms_per_step']:15.1f}"
                  f"{row['client_cpu_ms_per_step']:15.1f}")
    chunk = f"{config.chunk_bytes} B" if config.chunk_bytes else "4 MiB - 64 KiB (server default)"
    print(f"\nExportWeights: Llama of {models['export_parameters']:,} parameters (a LoRA rank {config.lora_rank} "
          f"adapter, and full); shm = same host (a shared-memory file, read and checked as the Rollout does), "
          f"stream = across hosts (chunks of {chunk}, drained and reassembled), vs safetensors save_file to "
          f"{results['safetensors_dir']}; median of {config.export_rounds} rounds")
    print(f"{'kind':6s}{'target':13s}{'MB':>8s}{'MB/s':>9s}{'ms':>8s}{'header ms':>11s}{'stream ms':>11s}"
          f"{'finish ms':>11s}{'server CPU ms':>15s}{'client CPU ms':>15s}")
    for adaptation, targets in summary["export"].items():
        for target, row in targets.items():
            phases = (f"{row['header_ms']:11.1f}{row['stream_ms']:11.1f}{row['finish_ms']:11.1f}"
                      f"{row['server_cpu_ms']:15.1f}" if target in TRANSPORTS else f"{'-':>11s}" * 3 + f"{'-':>15s}")
            print(f"{adaptation:6s}{target:13s}{row['bytes'] / 1e6:8.2f}{row['bytes_per_s'] / 1e6:9.1f}"
                  f"{row['ms']:8.1f}{phases}{row['client_cpu_ms']:15.1f}")
    losses = results["first_loss"]
    print("\nfirst step loss, grpc / in-process: " + ", ".join(
        f"{a} {losses[a]['grpc']:.6f} / {losses[a]['in-process']:.6f}" for a in ADAPTATIONS))
    print("exported weights equal to the in-process session's (names, checksum, tensors; both transports): " + ", ".join(
        f"{a} {'yes' if results['verified'][a]['equal'] else 'NO'}" for a in ADAPTATIONS))
    for name, value in results["ratios"].items():
        target = TARGET_RATIOS[name]
        where = "same host" if name.startswith("export_") else "across hosts" if name.startswith("stream_") else ""
        print(f"{name:34s}{value:6.2f}  target >= {target:.2f}: {'ok' if value >= target else 'MISS'}"
              f"{f'  ({where})' if where else ''}")
    print(f"{results['load_before']} before, {results['load_after']} after")


def trainer_process(tmp_path: Path, config: BenchConfig, shared_dir: Path) -> ServerProcess:
    port, nowhere = free_port(), free_port()
    return ServerProcess(
        name="trainer", command=[sys.executable, "-m", "opentinker_trainer"], port=port,
        log_path=tmp_path / "trainer.log", env=clean_environment(
            OPENTINKER_AUTH="disabled", OPENTINKER_TRAINER_PORT=str(port), OPENTINKER_TRAINER_HOST="127.0.0.1",
            OPENTINKER_TRAINER_DEVICE="cpu", OPENTINKER_TRAINER_SCHEDULER_ADDRESS=f"127.0.0.1:{nowhere}",
            OPENTINKER_CHECKPOINT_DIR=str(tmp_path / "checkpoints"), OMP_NUM_THREADS=str(config.threads),
            OPENTINKER_SHARED_WEIGHTS_DIR=str(shared_dir)))


def run(config: BenchConfig) -> dict[str, Any]:
    """The throughput sections (unless --memory-only), then the memory section."""
    results = {} if config.memory_only else run_throughput(config)
    with tempfile.TemporaryDirectory(prefix="bench-trainer-memory-") as tmp, \
            tempfile.TemporaryDirectory(prefix="bench-trainer-weights-", dir=shm_dir()) as shared:
        results["memory"] = run_memory(config, Path(tmp), Path(shared))
    return results


def run_throughput(config: BenchConfig) -> dict[str, Any]:
    """Start the server, measure both parts, stop it; the results (BenchFailure on a failed run)."""
    load_before = load_note()
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp, \
            tempfile.TemporaryDirectory(prefix="bench-trainer-weights-", dir=shm_dir()) as shared:
        tmp_path, shared_dir = Path(tmp), Path(shared)
        server = trainer_process(tmp_path, config, shared_dir)
        try:
            progress("starting the Trainer process; building the export model ...")
            server.start()
            export_dir, export_parameters = export_model_dir(config.export_sizes, tmp_path / "export-model")
            server.wait_serving(START_TIMEOUT_S)
            with grpc.insecure_channel(server.address) as channel:
                sides = Sides(pb_grpc.TrainerServiceStub(channel), server, config, shared_dir)
                progress("creating sessions (server and in-process) ...")
                sides.open(export_dir, tmp_path / "checkpoints")
                step_runs = run_steps(sides, config)
                export_runs, verified = run_exports(sides, config)
                left = sorted(str(p.relative_to(shared_dir)) for p in shared_dir.rglob("*") if p.is_file())
                if left:
                    raise BenchFailure(f"shared-memory files left behind after the exports: {left[:5]}")
        except (BenchFailure, grpc.RpcError) as failure:
            raise BenchFailure(f"{failure}\ntrainer log:\n{server.log_tail()}") from failure
        finally:
            server.stop()
    summary = summarize(step_runs, export_runs)
    ratio = ratios(step_runs, export_runs)
    return {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "host": {"python": platform.python_version(), "torch": torch.__version__, "cpus": os.cpu_count()},
        "models": {"step_parameters": sides.step_twins["full"].info.parameter_count,
                   "step_lora_trainable": sides.step_twins["lora"].info.trainable_parameter_count,
                   "export_parameters": export_parameters,
                   "export_lora_trainable": sides.export_twins["lora"].info.trainable_parameter_count},
        "safetensors_dir": str(shm_dir()), "first_loss": sides.first_loss, "verified": verified,
        "summary": summary, "ratios": ratio, "targets": TARGET_RATIOS,
        "meets_target": {name: value >= TARGET_RATIOS[name] for name, value in ratio.items()},
        "load_before": load_before, "load_after": load_note(),
        "runs": {"step": [asdict(r) for r in step_runs], "export": [asdict(r) for r in export_runs]}}


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    quiet_transformers()
    keep_freed_memory()  # as the services do: the receiver and the baseline get the same allocator
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        results = run(config)
    except BenchFailure as failure:
        print(f"bench failed: {failure}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(threads)
    if not config.memory_only:
        print_report(results, config)
    print_memory(results["memory"])
    config.out.parent.mkdir(parents=True, exist_ok=True)
    if config.memory_only and config.out.exists():  # keep the throughput results of an earlier run
        results = {**json.loads(config.out.read_text()), "memory": results["memory"]}
    config.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {config.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
