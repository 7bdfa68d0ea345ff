"""Tinker gateway latency: the real `tinker` SDK through the gateway against our own gRPC
primitives doing the same work on the same Trainer and Rollout, in one run.

    .venv/bin/python bench/tinker_gateway.py            # 5 rounds x 4 steps + 3 samples per side (~1.5 min, 2 cores)
    .venv/bin/python bench/tinker_gateway.py --quick    # 2 rounds x 2 steps + 2 samples: a smoke run (~45 s)
    .venv/bin/python bench/tinker_gateway.py --model small-llama --json /tmp/tinker_gateway.json

What runs, all on this machine: a private stack (`opentinker up` with auth on and the gateway, on
free ports, OPENTINKER_TRAINER_CPU_SLOTS / OPENTINKER_ROLLOUT_CPU_SLOTS = 4) and one tenant
created with the admin key. Two sides train the same LoRA adapter from the same seed:

* `gateway` (side A): `tinker.ServiceClient` with the tenant's key, `create_lora_training_client`
  (`--model`, `--rank`, `seed`), so a SESSION job of the tenant leases a Trainer and a Rollout
  device. One step is `forward_backward(batch, "cross_entropy")` and `optim_step(AdamParams)`
  submitted back to back, then both results awaited (as Tinker recommends). Sampling is one
  `SamplingClient.sample` call (`--num-samples` completions of `--max-tokens` tokens, seeded) on
  `save_weights_and_get_sampling_client()` taken after the warm-up.
* `grpc` (side B): `opentinker.client.primitives.TrainingClient` / `SamplingClient` with the
  stack's admin key, straight to the same Trainer and Rollout: the session the gateway would create
  (LoRA rank `--rank`, alpha 32, every linear layer and lm_head, AdamW lr `--lr`, beta2 0.95,
  eps 1e-12, no clipping, the same seed), ForwardBackward with cross-entropy summed over targets
  (the gateway's `loss:sum`) on the very same token sequences, then OptimStep; Sample with the same
  prompt, n, max_new_tokens, temperature and seed.

The batch: `--sequences` sequences of `--tokens` random token ids (a fixed seed), every target
position weighted 1. After `--warmup` untimed steps and one untimed sample per side, each of
`--rounds` rounds times `--steps` steps and `--sample-calls` sample calls of each side, the
sides back to back, the order alternating from round to round (a drift in the machine's load hits
both alike). Reported: the median step and sample latency of each side, and the ratio
grpc / gateway of the medians (the gateway path's speed relative to direct gRPC; target >= 0.8,
i.e. the gateway costs at most 25% more time); the per-round ratios too. Both sides must do the
same work: the same steps, tokens and first loss (within 1e-3), losses finite and falling.

Results: a table on stdout (PASS/MISS against the target; a MISS does not fail the run),
progress on stderr, JSON with --json PATH. Exit status 1 when the run fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

os.environ.setdefault("TINKER_TELEMETRY", "0")

import tinker  # noqa: E402
from tinker import types  # noqa: E402

from opentinker_api.common.v1 import datum_pb2  # noqa: E402
from opentinker.client.primitives import SamplingClient, TrainingClient  # noqa: E402
from harness.stack import LocalStack, run_cli  # noqa: E402
from harness.stack_spec import StackSpec  # noqa: E402

SIDES = ("gateway", "grpc")
TARGET = 0.8
"""grpc / gateway median latency: the gateway path at least 0.8x as fast as direct gRPC."""
SLOTS = "4"
LORA_ALPHA = 32.0
"""The gateway's LoRA scale (Tinker's: alpha 32 whatever the rank)."""
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
VOCAB = 256
"""Random token ids below this: inside every built-in model's byte-level vocabulary."""
QUICK_DEFAULTS = {"rounds": (5, 2), "steps": (4, 2), "warmup": (2, 1), "sample_calls": (3, 2)}


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    model: str = "tiny-llama"
    rank: int = 8
    seed: int = 7
    lr: float = 5e-3
    sequences: int = 8
    tokens: int = 64
    num_samples: int = 4
    max_tokens: int = 16
    prompt_tokens: int = 16
    rounds: int = 5
    steps: int = 4
    warmup: int = 2
    sample_calls: int = 3
    quick: bool = False


@dataclass(kw_only=True)
class SideRecord:
    step_s: list[float] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    """loss:sum of every forward_backward, warm-up included, in order."""
    steps: int = 0
    trained_tokens: int = 0
    """Target positions trained over (summed over steps)."""
    sampled_tokens: list[int] = field(default_factory=list)
    """Tokens of each timed sample call (all completions)."""
    round_step_s: list[float] = field(default_factory=list)
    round_sample_s: list[float] = field(default_factory=list)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_note() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def batch_tokens(config: BenchConfig) -> list[list[int]]:
    """`sequences` sequences of `tokens` + 1 ids: model input tokens[:-1], targets tokens[1:]."""
    rng = random.Random(config.seed)
    return [[rng.randrange(1, VOCAB) for _ in range(config.tokens + 1)] for _ in range(config.sequences)]


def prompt(config: BenchConfig) -> list[int]:
    rng = random.Random(config.seed + 1)
    return [rng.randrange(1, VOCAB) for _ in range(config.prompt_tokens)]


# ---- side A: the tinker SDK through the gateway ---------------------------------------------


class GatewaySide:
    name = "gateway"

    def __init__(self, config: BenchConfig, url: str, tenant_key: str) -> None:
        self.config = config
        self.service = tinker.ServiceClient(base_url=url, api_key=f"tml-{tenant_key}")
        self.training = self.service.create_lora_training_client(base_model=config.model, rank=config.rank,
                                                                 seed=config.seed).result()
        self.data = [types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]),
                                 loss_fn_inputs={"target_tokens": seq[1:], "weights": [1.0] * (len(seq) - 1)})
                     for seq in batch_tokens(config)]
        self.adam = types.AdamParams(learning_rate=config.lr)
        self.sampler: Any = None

    def step(self) -> tuple[float, int]:
        backward = self.training.forward_backward(self.data, "cross_entropy")
        optim = self.training.optim_step(self.adam)
        result = backward.result()
        optim.result()
        return float(result.metrics["loss:sum"]), sum(len(d.model_input.to_ints()) for d in self.data)

    def start_sampler(self) -> None:
        self.sampler = self.training.save_weights_and_get_sampling_client().result()
        self.sample_prompt = types.ModelInput.from_ints(prompt(self.config))
        self.params = types.SamplingParams(max_tokens=self.config.max_tokens, temperature=1.0, seed=self.config.seed)

    def sample(self) -> int:
        response = self.sampler.sample(prompt=self.sample_prompt, num_samples=self.config.num_samples,
                                       sampling_params=self.params).result()
        return sum(len(s.tokens) for s in response.sequences)

    def close(self) -> None:
        self.service.close("success").result()


# ---- side B: our gRPC primitives, straight to the Trainer and the Rollout -------------------


class GrpcSide:
    name = "grpc"

    def __init__(self, config: BenchConfig, trainer: str, rollout: str, admin_key: str) -> None:
        self.config, self.rollout = config, rollout
        self.training = TrainingClient(
            trainer, base_model={"builtin": {"name": config.model, "seed": 0}},
            adaptation={"lora": {"rank": config.rank, "alpha": LORA_ALPHA, "target_modules": LORA_MODULES}},
            optimizer={"learning_rate": config.lr, "beta2": 0.95, "epsilon": 1e-12},
            seed=config.seed, api_key=admin_key)
        # The gateway's datum for the same Tinker datum: the whole sequence, index 0 untrained.
        self.datums = [datum_pb2.Datum(tokens=seq, loss_mask=[0.0] + [1.0] * (len(seq) - 1))
                       for seq in batch_tokens(config)]
        self.loss = {"function": "LOSS_FUNCTION_CROSS_ENTROPY", "aggregation": "LOSS_AGGREGATION_SUM"}
        self.sampler: SamplingClient | None = None

    def step(self) -> tuple[float, int]:
        result = self.training.forward_backward(self.datums, self.loss)
        self.training.optim_step(learning_rate=self.config.lr)
        return float(result.loss), sum(len(d.tokens) - 1 for d in self.datums)

    def start_sampler(self) -> None:
        self.sampler = self.training.save_weights_and_get_sampling_client(self.rollout)

    def sample(self) -> int:
        assert self.sampler is not None
        results = self.sampler.sample([prompt(self.config)], max_new_tokens=self.config.max_tokens,
                                      temperature=1.0, n=self.config.num_samples, seed=self.config.seed)
        return sum(len(c.tokens) for c in results[0].completions)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
        self.training.close()


# ---- the run ----------------------------------------------------------------------------------


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = call()
    return time.perf_counter() - start, value


def run_round(sides: list[Any], records: dict[str, SideRecord], config: BenchConfig) -> None:
    for side in sides:
        record = records[side.name]
        step_times = []
        for _ in range(config.steps):
            seconds, (loss, tokens) = timed(side.step)
            step_times.append(seconds)
            record.losses.append(loss)
            record.steps += 1
            record.trained_tokens += tokens
        sample_times = []
        for _ in range(config.sample_calls):
            seconds, sampled = timed(side.sample)
            sample_times.append(seconds)
            record.sampled_tokens.append(sampled)
        record.step_s.extend(step_times)
        record.sample_s.extend(sample_times)
        record.round_step_s.append(statistics.median(step_times))
        record.round_sample_s.append(statistics.median(sample_times))


def warm_up(side: Any, record: SideRecord, config: BenchConfig) -> None:
    for _ in range(config.warmup):
        loss, _ = side.step()
        record.losses.append(loss)
    side.start_sampler()
    side.sample()


def tenant_key(stack: LocalStack, tenant: str) -> str:
    result = run_cli("admin", "tenants", "create", tenant, "--scheduler", stack.address("scheduler"),
                     env={**os.environ, "OPENTINKER_API_KEY": stack.api_key})
    if result.returncode != 0:
        raise RuntimeError(f"tenants create failed: {result.stderr}")
    return next(line for line in result.stdout.splitlines() if line.startswith("otk_")).strip()


def measure(config: BenchConfig, state_dir: Path) -> dict[str, SideRecord]:
    stack = LocalStack(state_dir, StackSpec.of(dashboard=False, gateway=True, OPENTINKER_TRAINER_CPU_SLOTS=SLOTS,
                                               OPENTINKER_ROLLOUT_CPU_SLOTS=SLOTS))
    os.environ.pop("OPENTINKER_API_KEY", None)  # the stack's own admin key, not the caller's
    progress("starting the stack (opentinker up, gateway on, auth on)")
    stack.up(timeout=180)
    records = {name: SideRecord() for name in SIDES}
    sides: list[Any] = []
    try:
        key = tenant_key(stack, "bench")
        progress(f"side gateway: create_lora_training_client({config.model}, rank {config.rank})")
        sides.append(GatewaySide(config, stack.gateway_url, key))
        progress("side grpc: TrainingClient on the Trainer")
        sides.append(GrpcSide(config, stack.address("trainer"), stack.address("rollout"), stack.api_key))
        for side in sides:
            warm_up(side, records[side.name], config)
        progress(f"warm-up done ({config.warmup} steps, 1 sample per side); {load_note()}")
        for index in range(config.rounds):
            order = sides if index % 2 == 0 else sides[::-1]
            run_round(order, records, config)
            progress(f"round {index + 1}/{config.rounds}: " + ", ".join(
                f"{s.name} step {records[s.name].round_step_s[-1] * 1e3:.0f} ms sample "
                f"{records[s.name].round_sample_s[-1] * 1e3:.0f} ms" for s in sides))
    except BaseException:
        progress(f"{stack.logs()}\n--- the bench\n{traceback.format_exc()}")
        raise
    finally:
        for side in sides:
            try:
                side.close()
            except Exception as error:  # noqa: BLE001 - the report matters more than a clean close
                progress(f"closing {side.name} failed: {error}")
        stack.down()
    return records


def summary(config: BenchConfig, records: dict[str, SideRecord]) -> dict:
    medians = {name: {"step_s": statistics.median(r.step_s), "sample_s": statistics.median(r.sample_s)}
               for name, r in records.items()}
    gateway, grpc_ = records["gateway"], records["grpc"]
    ratios = {
        "step": medians["grpc"]["step_s"] / medians["gateway"]["step_s"],
        "sample": medians["grpc"]["sample_s"] / medians["gateway"]["sample_s"],
    }
    per_round = {
        "step": [b / a for a, b in zip(gateway.round_step_s, grpc_.round_step_s, strict=True)],
        "sample": [b / a for a, b in zip(gateway.round_sample_s, grpc_.round_sample_s, strict=True)],
    }
    return {
        "bench": "tinker_gateway",
        "config": asdict(config),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "load": load_note(), "tinker": tinker.__version__},
        "target": TARGET,
        "sides": {name: {**asdict(r), "median_step_s": medians[name]["step_s"],
                         "median_sample_s": medians[name]["sample_s"]} for name, r in records.items()},
        "ratios": ratios,
        "per_round_ratios": per_round,
        "verdicts": {k: "PASS" if v >= TARGET else "MISS" for k, v in ratios.items()},
    }


def report(result: dict) -> None:
    config = result["config"]
    print(f"\nTinker gateway vs direct gRPC: {config['model']} LoRA rank {config['rank']}, "
          f"{config['sequences']} x {config['tokens']} tokens cross_entropy, {config['rounds']} rounds x "
          f"{config['steps']} steps; sample n={config['num_samples']} max_tokens={config['max_tokens']}")
    print(f"{'side':10s}{'step ms':>10s}{'sample ms':>11s}{'first loss':>12s}{'last loss':>11s}")
    for name, side in result["sides"].items():
        print(f"{name:10s}{side['median_step_s'] * 1e3:10.1f}{side['median_sample_s'] * 1e3:11.1f}"
              f"{side['losses'][0]:12.3f}{side['losses'][-1]:11.3f}")
    for kind, value in result["ratios"].items():
        rounds = " ".join(f"{r:.2f}" for r in result["per_round_ratios"][kind])
        print(f"grpc/gateway {kind:7s}{value:6.2f}  target >= {TARGET}: {result['verdicts'][kind]}"
              f"  (per round: {rounds})")
    print(result["machine"]["load"])


def check_same_work(result: dict) -> list[str]:
    """What makes the comparison unfair or broken; empty when both sides did the same work."""
    gateway, grpc_ = result["sides"]["gateway"], result["sides"]["grpc"]
    problems = []
    for key in ("steps", "trained_tokens"):
        if gateway[key] != grpc_[key]:
            problems.append(f"{key}: gateway {gateway[key]} != grpc {grpc_[key]}")
    for name, side in result["sides"].items():
        if not all(math.isfinite(v) for v in side["losses"]):
            problems.append(f"{name}: a loss is not finite")
        elif side["losses"][-1] >= side["losses"][0]:
            problems.append(f"{name}: loss did not fall ({side['losses'][0]:.4f} -> {side['losses'][-1]:.4f})")
    if not math.isclose(gateway["losses"][0], grpc_["losses"][0], rel_tol=1e-3):
        problems.append(f"first loss: gateway {gateway['losses'][0]:.5f} != grpc {grpc_['losses'][0]:.5f}")
    return problems


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, Path | None]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama", choices=("tiny-llama", "tiny-qwen2", "small-llama"))
    p.add_argument("--rank", type=int, default=8, help="LoRA rank")
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--sequences", type=int, default=8, help="datums per forward_backward")
    p.add_argument("--tokens", type=int, default=64, help="model input tokens per datum")
    p.add_argument("--num-samples", type=int, default=4, help="completions per sample call")
    p.add_argument("--max-tokens", type=int, default=16, help="max tokens per completion")
    p.add_argument("--rounds", type=int, help="rounds (default 5; 2 with --quick)")
    p.add_argument("--steps", type=int, help="timed steps per side and round (default 4; 2 with --quick)")
    p.add_argument("--warmup", type=int, help="untimed steps per side first (default 2; 1 with --quick)")
    p.add_argument("--sample-calls", type=int, help="timed sample calls per side and round (default 3; 2 with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer rounds and steps: a smoke run for CI")
    p.add_argument("--json", type=Path, help="write the report as JSON here")
    a = p.parse_args(argv)
    counts = {name: getattr(a, name) if getattr(a, name) is not None else defaults[a.quick]
              for name, defaults in QUICK_DEFAULTS.items()}
    if min(counts.values()) < 1 or min(a.sequences, a.tokens, a.num_samples, a.max_tokens, a.rank) < 1:
        p.error("counts and sizes must be >= 1")
    config = BenchConfig(model=a.model, rank=a.rank, lr=a.lr, sequences=a.sequences, tokens=a.tokens,
                         num_samples=a.num_samples, max_tokens=a.max_tokens, quick=a.quick, **counts)
    return config, a.json


def main(argv: list[str] | None = None) -> int:
    config, json_path = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-tinker-gateway-") as tmp:
        try:
            records = measure(config, Path(tmp).resolve())
        except Exception as error:  # noqa: BLE001 - a bench reports its failure and exits 1
            progress(f"bench failed: {type(error).__name__}: {error}")
            return 1
    result = summary(config, records)
    result["same_work_problems"] = check_same_work(result)
    report(result)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    for problem in result["same_work_problems"]:
        progress(f"not the same work: {problem}")
    return 1 if result["same_work_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
