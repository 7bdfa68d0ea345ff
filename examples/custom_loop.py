"""A GRPO loop written by hand over the Trainer and Rollout primitives, as with Tinker
(the SDK's TrainingClient and SamplingClient, opentinker.client.primitives).

    python examples/custom_loop.py --local       # starts its own Trainer and Rollout
    python examples/custom_loop.py --trainer 127.0.0.1:50052 --rollout 127.0.0.1:50053

examples/math_rl.py submits jobs and the Coordinator runs the loop; here the loop is yours.
Each step:
  1. Rollout.Sample: G completions for each of B prompts, every token with its logprob;
  2. rewards, computed here; GRPO advantages (reward minus the group's mean);
  3. Trainer.ForwardBackward on one datum per completion (PPO clip loss), Trainer.OptimStep;
  4. Trainer.ExportWeights streamed into Rollout.UpdateWeights, so the next step samples
     from the policy just trained.
At the end the Trainer saves the adapter as a checkpoint.

The task is a toy that a randomly initialised builtin model learns in 10-20 steps on a CPU:
it is asked two-digit additions and paid for digits (reward = digits in the reply / the
reply's token budget; whether the sum is right does not count). Reward starts near 0.03
(digits are 10 of the byte tokenizer's 260 tokens) and climbs towards 1.

No Scheduler is needed and no lease is sent: a call with an empty LeaseContext runs outside
any job. Against a stack started by `opentinker up`, the API key is found as every client
finds it (OPENTINKER_API_KEY, or .opentinker/admin.key). With --local the two services run
as subprocesses with auth off; their logs and the checkpoint go under --out.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from opentinker_api.common.v1 import algorithm_pb2, model_pb2
from opentinker_api.rollout.v1 import rollout_service_pb2 as rollout_pb
from opentinker_api.trainer.v1 import trainer_service_pb2 as trainer_pb
from opentinker.cli.health_probe import SERVING, check_health
from opentinker.client.credentials import resolve_api_key
from opentinker.client.errors import OpenTinkerError
from opentinker.client.primitives import SamplingClient, TrainingClient, datum
from opentinker_runtime.ml.chat import render_prompt
from opentinker_runtime.ml.tokenizer import build_byte_tokenizer

SYSTEM_PROMPT = "Answer with digits only."
DIGIT_TOKENS = frozenset(range(ord("0"), ord("9") + 1))  # byte tokenizer: token id = byte value
# Every linear layer and the output head. A random model's head has to move: with it frozen,
# LoRA can only turn the last hidden state, and digits stay under ~8% of the tokens. (The head
# is tied to the embedding, so peft also ships the frozen embedding with every weight sync.)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    trainer: str
    rollout: str
    local: bool
    out: Path
    model: str
    seed: int
    steps: int
    batch_size: int
    group_size: int
    max_new_tokens: int
    temperature: float
    learning_rate: float
    lora_rank: int
    full: bool

    @property
    def base_model(self) -> model_pb2.ModelReference:
        return model_pb2.ModelReference(builtin=model_pb2.BuiltinModel(name=self.model, seed=self.seed))

    @property
    def adaptation(self) -> model_pb2.Adaptation:
        if self.full:
            return model_pb2.Adaptation(full=model_pb2.FullAdaptation())
        return model_pb2.Adaptation(lora=model_pb2.LoraAdaptation(
            rank=self.lora_rank, alpha=2.0 * self.lora_rank, target_modules=LORA_TARGETS))

    @property
    def loss(self) -> algorithm_pb2.LossConfig:
        """PPO clip against the sampling logprobs, scored at the temperature Rollout sampled at."""
        return algorithm_pb2.LossConfig(
            function=algorithm_pb2.LOSS_FUNCTION_PPO_CLIP,
            aggregation=algorithm_pb2.LOSS_AGGREGATION_TOKEN_MEAN,
            clip_low=0.2, clip_high=0.2, temperature=self.temperature)


@dataclass(frozen=True, kw_only=True)
class StepLog:
    """One step. `sampled_version`: the policy version the completions came from;
    `policy_version`: the Rollout's version once this step's weights reached it."""

    step: int
    reward_mean: float
    loss: float
    logprob_gap: float
    sampled_version: int
    policy_version: int
    seconds: float


@dataclass(frozen=True, kw_only=True)
class LoopResult:
    steps: list[StepLog]
    checkpoint_id: str
    checkpoint_path: str


def parse_args(argv: Sequence[str] | None = None) -> LoopConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer", default="127.0.0.1:50052", help="TrainerService address")
    p.add_argument("--rollout", default="127.0.0.1:50053", help="RolloutService address")
    p.add_argument("--local", action="store_true",
                   help="start a Trainer and a Rollout as subprocesses on free ports instead")
    p.add_argument("--out", type=Path, default=Path("runs/custom_loop"),
                   help="with --local: where the services' logs and checkpoints go")
    p.add_argument("--model", default="tiny-llama", help="builtin model: tiny-llama or tiny-qwen2")
    p.add_argument("--seed", type=int, default=1, help="model init, prompts and sampling")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4, help="prompts per step (B)")
    p.add_argument("--group-size", type=int, default=16, help="completions per prompt (G)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--learning-rate", type=float, default=1e-2)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--full", action="store_true", help="train every parameter instead of a LoRA adapter")
    return LoopConfig(**vars(p.parse_args(argv)))


# ---- the task: prompts, and a reward computed here -------------------------------------------

def make_prompts(rng: random.Random, count: int) -> list[list[dict[str, str]]]:
    """`count` chat prompts, each a fresh two-digit addition."""
    return [[{"role": "system", "content": SYSTEM_PROMPT},
             {"role": "user", "content": f"{rng.randint(10, 99)}+{rng.randint(10, 99)}="}]
            for _ in range(count)]


def reward(tokens: Sequence[int], max_new_tokens: int) -> float:
    """Digits in the completion per token of its budget (1.0 = max_new_tokens digits).
    Dividing by the reply's own length instead would pay a bare "7<eos>" 0.5, and the policy
    would learn to stop at once."""
    return sum(t in DIGIT_TOKENS for t in tokens) / max_new_tokens


# ---- the algorithm: GRPO advantages, datums ----------------------------------------------------

def grpo_advantages(rewards_G: Sequence[float]) -> list[float]:
    """A_i = r_i - mean(group): a completion better than its siblings is pushed up, a worse
    one down; a group that all scored alike teaches nothing."""
    baseline = sum(rewards_G) / len(rewards_G)
    return [r - baseline for r in rewards_G]


# ---- the loop ----------------------------------------------------------------------------------

class Loop:
    """One Trainer session and one Rollout policy of the same base model, kept in step
    (the SDK's Tinker-style primitives: TrainingClient and SamplingClient)."""

    def __init__(self, config: LoopConfig, trainer_address: str, rollout_address: str, api_key: str) -> None:
        self.config = config
        self.addresses, self.api_key = (trainer_address, rollout_address), api_key
        self.tokenizer = build_byte_tokenizer()  # the builtin models' tokenizer (ChatML template)
        self.trainer: TrainingClient | None = None
        self.sampler: SamplingClient | None = None

    def open(self) -> None:
        c = self.config
        self.trainer = TrainingClient(self.addresses[0], base_model=c.base_model, adaptation=c.adaptation,
                                      optimizer={"learning_rate": c.learning_rate, "max_grad_norm": 1.0},
                                      seed=c.seed, api_key=self.api_key)
        # same base; with LoRA, a fresh adapter (a no-op until the first weight sync fills it)
        self.sampler = SamplingClient(self.addresses[1], model=c.base_model, adaptation=c.adaptation,
                                      api_key=self.api_key)

    def close(self) -> None:
        for client in (self.sampler, self.trainer):
            if client is not None:
                client.close()

    def sample(self, prompts_B: Sequence[Sequence[int]], step: int) -> list[rollout_pb.PromptCompletions]:
        c = self.config
        return self.sampler.sample(prompts_B, max_new_tokens=c.max_new_tokens, temperature=c.temperature,
                                   n=c.group_size, seed=c.seed * 100_003 + step)

    def step(self, step: int, rng: random.Random) -> StepLog:
        started = time.perf_counter()
        prompts_B = [render_prompt(self.tokenizer, m) for m in make_prompts(rng, self.config.batch_size)]
        results_B = self.sample(prompts_B, step)
        datums, rewards = [], []
        for prompt, result in zip(prompts_B, results_B, strict=True):
            rewards_G = [reward(c.tokens, self.config.max_new_tokens) for c in result.completions]
            for completion, advantage in zip(result.completions, grpo_advantages(rewards_G), strict=True):
                # index t predicts tokens[t]: the completion's tokens carry the advantage and
                # their sampling logprobs; the prompt's are masked out
                datums.append(datum(prompt, completion.tokens, advantage=advantage,
                                    sampling_logprobs=completion.logprobs))
            rewards += rewards_G
        # one ForwardBackward over the whole batch and one OptimStep (on-policy the ratio is 1,
        # so the loss is -mean(A) ~ 0; its gradient is not)
        backward = self.trainer.forward_backward(datums, self.config.loss)
        trained_version = self.trainer.optim_step().policy_version
        # ExportWeights piped into UpdateWeights; the Rollout applies them once all arrived
        policy_version = self.sampler.load_weights_from(self.trainer)
        if policy_version != trained_version:
            raise RuntimeError(f"Rollout is at policy version {policy_version}, "
                               f"the Trainer at {trained_version}")
        return StepLog(step=step, reward_mean=sum(rewards) / len(rewards), loss=backward.loss,
                       logprob_gap=backward.metrics["logprob_gap/mean"],
                       sampled_version=results_B[0].completions[0].policy_version,
                       policy_version=policy_version, seconds=time.perf_counter() - started)

    def save(self) -> trainer_pb.Checkpoint:
        return self.trainer.save_state("final")


def train_loop(config: LoopConfig, trainer_address: str, rollout_address: str, api_key: str) -> LoopResult:
    loop, rng = Loop(config, trainer_address, rollout_address, api_key), random.Random(config.seed)
    try:
        loop.open()
        logs = []
        for step in range(1, config.steps + 1):
            log = loop.step(step, rng)
            logs.append(log)
            print(f"step {log.step:3d}  reward {log.reward_mean:.3f}  loss {log.loss:+.1e}  "
                  f"logprob gap {log.logprob_gap:.1e}  "
                  f"policy v{log.sampled_version} -> v{log.policy_version}  {log.seconds:.2f}s", flush=True)
        checkpoint = loop.save()
        print(f"checkpoint {checkpoint.checkpoint_id} at {checkpoint.path}", flush=True)
        return LoopResult(steps=logs, checkpoint_id=checkpoint.checkpoint_id, checkpoint_path=checkpoint.path)
    finally:
        loop.close()


# ---- where the services are --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def local_services(out: Path, timeout: float = 90.0) -> Iterator[tuple[str, str]]:
    """(trainer, rollout) addresses of two subprocesses sharing a checkpoint directory; auth off.

    They are pointed at a Scheduler socket that does not exist: every service registers with a
    Scheduler as a worker, and these must not join one that happens to run on this machine.
    They answer our calls all the same (registration only retries in the background).
    """
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    environment = {key: value for key, value in os.environ.items() if not key.startswith("OPENTINKER_")}
    environment |= {"OPENTINKER_AUTH": "disabled",
                    "OPENTINKER_CHECKPOINT_DIR": str((out / "checkpoints").resolve())}
    no_scheduler = f"unix:{(out / 'no-scheduler.sock').resolve()}"
    processes: dict[str, subprocess.Popen] = {}
    addresses: dict[str, str] = {}
    try:
        for name in ("trainer", "rollout"):
            port, prefix = free_port(), f"OPENTINKER_{name.upper()}_"
            env = environment | {f"{prefix}PORT": str(port), f"{prefix}SCHEDULER_ADDRESS": no_scheduler}
            with (logs / f"{name}.log").open("wb") as log_file:
                processes[name] = subprocess.Popen([sys.executable, "-m", f"opentinker_{name}"], env=env,
                                                   stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file)
            addresses[name] = f"127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        for name, process in processes.items():
            wait_serving(process, addresses[name], deadline, logs / f"{name}.log")
        yield addresses["trainer"], addresses["rollout"]
    finally:
        stop(list(processes.values()))


def wait_serving(process: subprocess.Popen, address: str, deadline: float, log: Path) -> None:
    while check_health(address, timeout=1.0) != SERVING:
        if process.poll() is not None:
            raise RuntimeError(f"{' '.join(process.args)} exited with {process.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{address} is not SERVING; see {log}")
        time.sleep(0.2)


def stop(processes: Sequence[subprocess.Popen], grace: float = 15.0) -> None:
    """SIGTERM each (the services shut down gracefully), then SIGKILL what outlives `grace`."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run(config: LoopConfig) -> LoopResult:
    with ExitStack() as stack:
        if config.local:
            trainer_address, rollout_address = stack.enter_context(local_services(config.out))
            api_key = ""  # they run with auth off
        else:
            trainer_address, rollout_address, api_key = config.trainer, config.rollout, resolve_api_key()
        print(f"trainer {trainer_address}  rollout {rollout_address}", flush=True)
        return train_loop(config, trainer_address, rollout_address, api_key)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        result = run(parse_args(argv))
    except OpenTinkerError as error:  # e.g. UNAUTHENTICATED: no API key found for the stack
        print(error, file=sys.stderr)
        return 1
    rewards = [log.reward_mean for log in result.steps]
    print(f"mean reward {rewards[0]:.3f} at step 1, {rewards[-1]:.3f} at step {len(rewards)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
