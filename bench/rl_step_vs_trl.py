"""One GRPO step through the OpenTinker services vs the same step in-process with TRL.

    .venv/bin/pip install -r requirements/bench.txt      # TRL: optional, for this bench only
    .venv/bin/python bench/rl_step_vs_trl.py              # starts and stops a private stack
    .venv/bin/python bench/rl_step_vs_trl.py --scheduler 127.0.0.1:50051   # reuse a running stack
    .venv/bin/python bench/rl_step_vs_trl.py --max-staleness 0 1 2         # ours once per k

Both sides train the builtin `tiny-llama` (same seed, byte tokenizer, full parameters) on the
`math` game's train problems, in the same order, with the same batch size B (problems per
step), group size G, max new tokens N, temperature 1, learning rate, AdamW, grad-norm clip 1
and no KL term:

* ours: an RL job (PPO_CLIP, TOKEN_MEAN, GRPO advantages) submitted to the Scheduler; per
  step the Coordinator runs Rollout (batched generation + EnvHost game steps), Trainer
  ForwardBackward + OptimStep, and a full weight sync Trainer -> Rollout. Step time is the
  wall time between consecutive step metrics events (Scheduler timestamps); the job's
  time/rollout_s, time/update_s and time/weight_sync_s split it.
* TRL: `GRPOTrainer` in this process with per_device_train_batch_size = B*G completions,
  num_generations = G, one optimizer step per generation batch, loss_type "dapo" (token mean
  over the batch, like TOKEN_MEAN), scale_rewards "none" (our GRPO default), beta 0, epsilon
  0.2, gradient_checkpointing off (TRL defaults to on; our Trainer does not recompute
  activations); its reward function plays `MathGame.step` on every completion. Step time is
  the wall time between consecutive `on_step_end` callbacks; "rollout" is the time spent in
  `_generate_and_score_completions` (generation, rewards, advantages), "update" the rest.

Not timed: our job's evaluations (before the first step and after the last) and TRL's set-up.
One difference stays: our agent loop ends an episode cut off at N tokens without a game step
(reward 0), TRL scores every completion; the untrained model rarely stops on its own, so our
side plays fewer game steps (EnvHost still opens, resets and closes a session per episode).

--max-staleness K [K ...] runs our job once per k with the JobSpec's `"async": {"max_staleness":
k}` (0 = synchronous) and prints one ratio per k against the same TRL runs; a k the stack refuses
is reported and skipped.

Each of --rounds rounds runs TRL once and ours once per k (the order alternates, so slow drifts
in the machine's load hit both alike); every run drops its first --warmup steps and the table
shows medians over the remaining steps of all rounds. CPU seconds per step are the CPU time of
this process (TRL) or of each stack process (ours, private stack only: the table shows the
Trainer's, the Rollout's, the EnvHost's and the rest's) over the timed steps. torch uses
--threads threads in this process (TRL; default one per core, torch's own default); the private
stack's Trainer and Rollout use --trainer-threads and --rollout-threads (their
OPENTINKER_*_TORCH_THREADS settings; 0 = the services' own default, half the cores).
Results go to bench/results/rl_step_vs_trl-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"
STEP_KEYS = ("wall_s", "rollout_s", "update_s", "weight_sync_s", "generated_tokens")
CPU_COLUMNS = ("trainer", "rollout", "envhost")
"""Stack processes with a CPU column of their own; the others add up in "rest"."""
K1_TARGET = 0.8
"""Issue 21's goal: with max_staleness 1 a step takes at most this fraction of TRL's."""


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    batch_size: int
    group_size: int
    max_new_tokens: int
    steps: int
    warmup: int
    rounds: int
    learning_rate: float
    seed: int
    model: str
    difficulty: str
    threads: int
    trainer_threads: int
    rollout_threads: int
    max_staleness: tuple[int, ...]
    scheduler: str | None
    state_dir: Path
    base_port: int
    redis_port: int
    rollout_max_batch_size: int
    trl_gradient_checkpointing: bool
    skip_ours: bool
    skip_trl: bool
    out: Path

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    @property
    def game_config(self) -> dict:
        return {"seed": self.seed, "difficulty": self.difficulty, "eval_size": 8}


def parse_args(argv: list[str] | None) -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=8, help="problems per step (B)")
    p.add_argument("--group-size", type=int, default=8, help="completions per problem (G)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="max new tokens per completion (N)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every run")
    p.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="torch threads of TRL (this process); default: one per core, torch's own default")
    p.add_argument("--trainer-threads", type=int, default=0,
                   help="OPENTINKER_TRAINER_TORCH_THREADS of the private stack (0 = the service default)")
    p.add_argument("--rollout-threads", type=int, default=0,
                   help="OPENTINKER_ROLLOUT_TORCH_THREADS of the private stack (0 = the service default)")
    p.add_argument("--max-staleness", type=int, nargs="+", default=[0], metavar="K",
                   help="run ours once per k with the JobSpec's async.max_staleness = k (0 = synchronous)")
    p.add_argument("--scheduler", default=None, help="use this running stack instead of a private one")
    p.add_argument("--state-dir", type=Path, default=Path("/tmp/bench-stack"))
    p.add_argument("--base-port", type=int, default=55251)
    p.add_argument("--redis-port", type=int, default=6691)
    p.add_argument("--rollout-max-batch-size", type=int, default=0,
                   help="OPENTINKER_ROLLOUT_MAX_BATCH_SIZE of the private stack (0 = the service default)")
    p.add_argument("--trl-gradient-checkpointing", action="store_true",
                   help="keep TRL's default gradient_checkpointing=True (off here: our Trainer does not "
                        "recompute activations, so the default would charge TRL an extra forward)")
    p.add_argument("--skip-ours", action="store_true")
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS_DIR)
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 1 or a.rounds < 1:
        p.error("--steps, --warmup and --rounds must be >= 1 (the first step has no start time)")
    if min(a.max_staleness) < 0 or min(a.threads, a.trainer_threads, a.rollout_threads) < 0:
        p.error("--max-staleness and the thread counts must be >= 0")
    a.max_staleness = tuple(dict.fromkeys(a.max_staleness))
    return BenchConfig(**vars(a))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# Ours: an RL job on the services


def opentinker_cli() -> list[str]:
    found = Path(sys.executable).with_name("opentinker")
    return [str(found)] if found.exists() else [shutil.which("opentinker") or "opentinker"]


@dataclass(frozen=True, kw_only=True)
class Stack:
    scheduler: str
    pids: dict[str, int]
    """Process ids by service name (empty for a stack we did not start)."""
    api_key: str | None = None
    """The private stack's admin key; None: the client finds one (OPENTINKER_API_KEY, ...)."""


@contextlib.contextmanager
def private_stack(config: BenchConfig) -> Iterator[Stack]:
    """`opentinker up` on private ports; always `opentinker down` afterwards."""
    env = dict(os.environ)
    if config.trainer_threads:
        env["OPENTINKER_TRAINER_TORCH_THREADS"] = str(config.trainer_threads)
    if config.rollout_threads:
        env["OPENTINKER_ROLLOUT_TORCH_THREADS"] = str(config.rollout_threads)
    if config.rollout_max_batch_size:
        env["OPENTINKER_ROLLOUT_MAX_BATCH_SIZE"] = str(config.rollout_max_batch_size)
    state = ["--state-dir", str(config.state_dir)]
    up = [*opentinker_cli(), "up", *state, "--base-port", str(config.base_port), "--no-dashboard",
          "--redis-port", str(config.redis_port), "--timeout", "120"]
    print(f"$ {' '.join(up)}", file=sys.stderr)
    try:
        subprocess.run(up, check=True, env=env, stdout=subprocess.DEVNULL)
        recorded = json.loads((config.state_dir / "stack.json").read_text())
        yield Stack(scheduler=f"127.0.0.1:{config.base_port}",
                    pids={p["name"]: int(p["pid"]) for p in recorded["processes"]},
                    api_key=(config.state_dir / "admin.key").read_text().strip())
    finally:
        subprocess.run([*opentinker_cli(), "down", *state], check=False, stdout=subprocess.DEVNULL)


def rl_spec(config: BenchConfig, max_staleness: int = 0) -> dict:
    return {
        "type": "RL", "display_name": f"bench: rl step vs trl, max_staleness {max_staleness}",
        "async": {"max_staleness": max_staleness},
        "policy": {
            "model": {"builtin": {"name": config.model, "seed": config.seed}}, "adaptation": {"full": {}},
            "algorithm": {"optimizer": {"learning_rate": config.learning_rate, "max_grad_norm": 1.0},
                          "loss": {"function": "PPO_CLIP", "aggregation": "TOKEN_MEAN",
                                   "clip_low": 0.2, "clip_high": 0.2},
                          "advantage": {"estimator": "GRPO"}},
            "sampling": {"max_new_tokens": config.max_new_tokens, "temperature": 1.0},
        },
        "environment": {"env_name": "math", "config": config.game_config},
        "training": {"total_steps": config.total_steps, "batch_size": config.batch_size,
                     "group_size": config.group_size, "eval_every_steps": 0, "eval_episodes": 8,
                     "seed": config.seed},
    }


def run_ours(config: BenchConfig, stack: Stack, max_staleness: int = 0) -> dict:
    """One job; {"refused": why} when the Scheduler refuses its spec (e.g. an unsupported k)."""
    from opentinker_api.scheduler.v1 import job_pb2
    from opentinker.client import SchedulerClient
    from opentinker.client.errors import FailedPrecondition, InvalidArgument, Unimplemented

    steps: list[dict] = []
    previous: list[float] = []
    cpu: list[dict[str, float]] = []

    def on_event(event) -> None:
        if event.WhichOneof("payload") != "metrics":
            return
        values, at = dict(event.metrics.values), event.time.ToDatetime().timestamp()
        if "time/rollout_s" in values:  # a training step (evaluation-only reports lack it)
            episodes = values.get("episodes", 0.0) - values.get("env_errors", 0.0)
            steps.append({
                "step": event.metrics.step, "wall_s": at - previous[-1] if previous else float("nan"),
                "rollout_s": values["time/rollout_s"], "update_s": values.get("time/update_s", 0.0),
                # an asynchronous job reports a weight sync with the step after it (or not at all)
                "weight_sync_s": values.get("time/weight_sync_s", 0.0), "completions": episodes,
                "generated_tokens": values.get("response_tokens/mean", 0.0) * episodes,
                "reward_mean": values.get("reward/mean", 0.0)})
            if len(steps) in (config.warmup, config.total_steps):
                cpu.append({name: cpu_seconds(pid) for name, pid in stack.pids.items()})
        previous.append(at)

    with SchedulerClient(stack.scheduler, api_key=stack.api_key) as client:
        try:
            job = client.submit_job(rl_spec(config, max_staleness))
        except (InvalidArgument, FailedPrecondition, Unimplemented) as error:
            print(f"ours k={max_staleness}: refused: {error}", file=sys.stderr)
            return {"max_staleness": max_staleness, "refused": str(error)}
        print(f"ours k={max_staleness}: job {job.job_id} on {stack.scheduler}", file=sys.stderr)
        final = client.wait(job.job_id, on_event=on_event)
    if final.state != job_pb2.Job.STATE_SUCCEEDED:
        raise SystemExit(f"ours: job {job.job_id} ended {job_pb2.Job.State.Name(final.state)}: {final.status_message}")
    cpu_per_step = ({name: (cpu[1][name] - cpu[0][name]) / config.steps for name in cpu[0]}
                    if len(cpu) == 2 else {})
    return {"job_id": job.job_id, "max_staleness": max_staleness, "steps": steps,
            "cpu_s_per_step": cpu_per_step}


# ---------------------------------------------------------------------------------------------
# TRL: GRPOTrainer in this process


class MathReward:
    """TRL reward function: our math game's step on each completion (problem = dataset index)."""

    __name__ = "math_game"

    def __init__(self, game_config: dict) -> None:
        from opentinker_runtime.games.math_game import MathGame

        self.game = MathGame(**game_config)
        self.generated_tokens: list[int] = []

    def __call__(self, prompts, completions, completion_ids, index, **_: object) -> list[float]:
        self.generated_tokens.append(sum(len(ids) for ids in completion_ids))
        rewards = []
        for completion, problem in zip(completions, index, strict=True):
            self.game.reset(index=int(problem), split="train")
            rewards.append(self.game.step(completion).reward)
        return rewards


def trl_dataset(config: BenchConfig, tokenizer):
    """The train problems our job plays, in its order (step k: indices k*B .. k*B+B-1), as
    prompts rendered with the chat template (exactly the tokens Rollout feeds the model)."""
    from datasets import Dataset

    from opentinker_env.game import opening_messages
    from opentinker_runtime.games.math_game import MathGame
    from opentinker_runtime.ml.chat import encode, render_prompt, render_text

    game = MathGame(**config.game_config)
    rows = []
    for index in range(config.total_steps * config.batch_size):
        messages = opening_messages(game.get_system_prompt(), game.get_initial_user_message(),
                                    game.reset(index=index, split="train"))
        text = render_text(tokenizer, messages, add_generation_prompt=True)
        if encode(tokenizer, text) != render_prompt(tokenizer, messages):
            raise AssertionError("the rendered prompt does not tokenize to Rollout's prompt tokens")
        rows.append({"prompt": text, "index": index})
    return Dataset.from_list(rows)


def trl_version() -> str:
    try:
        import trl
    except ImportError as error:
        raise SystemExit(f"TRL is not installed ({error}): .venv/bin/pip install -r requirements/bench.txt")
    return trl.__version__


def run_trl(config: BenchConfig) -> dict:
    import torch

    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)  # deprecations inside TRL/transformers
            torch.set_num_threads(config.threads)
            return _run_trl(config)
    finally:
        torch.set_num_threads(threads)


def _run_trl(config: BenchConfig) -> dict:
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from opentinker_runtime.ml.models import build_builtin, quiet_transformers
    from opentinker_runtime.ml.tokenizer import build_byte_tokenizer

    quiet_transformers()
    model, tokenizer = build_builtin(config.model, config.seed), build_byte_tokenizer()
    reward = MathReward(config.game_config)
    completions = config.batch_size * config.group_size

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.begins: list[float] = []
            self.ends: list[float] = []
            self.cpu: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.begins.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())
            self.cpu.append(time.process_time())

    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="bench-trl-") as output_dir:
        args = GRPOConfig(
            output_dir=output_dir, max_steps=config.total_steps, seed=config.seed, data_seed=config.seed,
            per_device_train_batch_size=completions, gradient_accumulation_steps=1,
            num_generations=config.group_size, steps_per_generation=1, num_iterations=1,
            max_completion_length=config.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0,
            learning_rate=config.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
            optim="adamw_torch", beta=0.0, epsilon=0.2, loss_type="dapo", scale_rewards="none",
            shuffle_dataset=False, remove_unused_columns=False, use_cpu=True, bf16=False, fp16=False,
            report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0, log_completions=False,
            gradient_checkpointing=config.trl_gradient_checkpointing)
        trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                              train_dataset=trl_dataset(config, tokenizer), processing_class=tokenizer,
                              callbacks=[timer])
        trainer.remove_callback(PrinterCallback)
        generation_s: list[float] = []
        generate_and_score = trainer._generate_and_score_completions

        def timed_generate_and_score(*a, **k):
            started = time.perf_counter()
            try:
                return generate_and_score(*a, **k)
            finally:
                generation_s.append(time.perf_counter() - started)

        trainer._generate_and_score_completions = timed_generate_and_score
        trainer.train()
        rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]

    if not len(timer.ends) == len(generation_s) == len(reward.generated_tokens) == config.total_steps:
        raise SystemExit(f"trl: expected {config.total_steps} steps, each generating once; got "
                         f"{len(timer.ends)} steps, {len(generation_s)} generations")
    steps = []
    for i, (begin, end) in enumerate(zip(timer.begins, timer.ends, strict=True)):
        steps.append({"step": i + 1, "wall_s": end - timer.ends[i - 1] if i else float("nan"),
                      "rollout_s": generation_s[i], "update_s": (end - begin) - generation_s[i],
                      "weight_sync_s": 0.0, "completions": float(completions),
                      "generated_tokens": float(reward.generated_tokens[i]),
                      "reward_mean": rewards[i] if i < len(rewards) else float("nan")})
    cpu = (timer.cpu[-1] - timer.cpu[config.warmup - 1]) / config.steps
    return {"steps": steps, "cpu_s_per_step": {"bench process": cpu}}


# ---------------------------------------------------------------------------------------------
# Report


def summarize(runs: list[dict], config: BenchConfig) -> dict:
    """Medians over the timed steps (after the warm-up) of every run."""
    timed = [step for run in runs for step in run["steps"][config.warmup:]]
    cpu_names = runs[0]["cpu_s_per_step"].keys() if runs and runs[0]["cpu_s_per_step"] else ()
    cpu = {name: median([run["cpu_s_per_step"][name] for run in runs]) for name in cpu_names}
    return {"median": {key: median([s[key] for s in timed]) for key in STEP_KEYS},
            "timed_steps": len(timed), "cpu_s_per_step": cpu, "cpu_s_per_step_total": sum(cpu.values()),
            "runs": runs}


def summarize_ours(runs_by_k: dict[int, list[dict]], config: BenchConfig) -> dict[str, dict]:
    """Per k (as a string, a JSON key): the summary of its runs, or why the stack refused it."""
    summaries: dict[str, dict] = {}
    for k, runs in runs_by_k.items():
        refused = [run["refused"] for run in runs if "refused" in run]
        summaries[str(k)] = ({"max_staleness": k, "refused": refused[0]} if refused
                             else {"max_staleness": k, **summarize(runs, config)})
    return summaries


def load_note() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def cpu_columns(cpu_s_per_step: dict[str, float]) -> list[float | None]:
    """CPU s per step of the CPU_COLUMNS processes and of the rest (None: not measured)."""
    if not cpu_s_per_step:
        return [None] * (len(CPU_COLUMNS) + 1)
    rest = sum(v for name, v in cpu_s_per_step.items() if name not in CPU_COLUMNS)
    return [cpu_s_per_step.get(name) for name in CPU_COLUMNS] + [rest]


def _cell(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.{digits}f}"


def table_lines(results: dict, config: BenchConfig) -> list[str]:
    """One row per side (ours once per k): wall time split by phase, then CPU s per step in all
    and by process."""
    header = (f"{'':9} {'step s':>7} {'rollout s':>9} {'update s':>9} {'w.sync s':>9} {'gen tokens':>10} "
              f"{'tokens/s':>8} {'CPU s':>6} " + " ".join(f"{name:>8}" for name in (*CPU_COLUMNS, "rest")))
    lines = [header]
    sides = [(f"ours k={k}", side) for k, side in results.get("ours_by_max_staleness", {}).items()]
    sides += [("trl", results["trl"])] if "trl" in results else []
    for label, side in sides:
        if "refused" in side:
            lines.append(f"{label:9} refused: {side['refused']}")
            continue
        m, cpu = side["median"], side["cpu_s_per_step"]
        total = side["cpu_s_per_step_total"] if cpu else None
        by_process = cpu_columns(cpu) if label != "trl" else [None] * (len(CPU_COLUMNS) + 1)
        lines.append(f"{label:9} {m['wall_s']:7.3f} {m['rollout_s']:9.3f} {m['update_s']:9.3f} "
                     f"{m['weight_sync_s']:9.3f} {m['generated_tokens']:10.0f} "
                     f"{m['generated_tokens'] / m['wall_s']:8.0f} {_cell(total, 6)} "
                     + " ".join(_cell(v, 8) for v in by_process))
    return lines


def ratio_line(results: dict) -> str | None:
    """One ratio ours/TRL per k, and the issue's target."""
    ratios = results.get("ratios", {})
    if not ratios:
        return None
    parts = ", ".join(f"k={k} {ratio:.2f}x" for k, ratio in ratios.items())
    return f"ratio ours/TRL step time: {parts} (target: k=1 <= {K1_TARGET}x)"


def print_table(results: dict, config: BenchConfig) -> None:
    print(f"\nOne GRPO step, {config.model}: B={config.batch_size} problems x G={config.group_size} = "
          f"{config.batch_size * config.group_size} completions of <= {config.max_new_tokens} new tokens; "
          f"median of {config.rounds} run(s) x {config.steps} steps (after {config.warmup} warm-up) per side; "
          f"CPU s per step in all and by process")
    for line in table_lines(results, config):
        print(line)
    if (line := ratio_line(results)) is not None:
        print(line)
    for k, side in results.get("ours_by_max_staleness", {}).items():
        if side.get("cpu_s_per_step"):
            parts = ", ".join(f"{name} {v:.2f}" for name, v in side["cpu_s_per_step"].items())
            print(f"ours k={k} CPU s per step by process: {parts}")
    print(f"{results['load_before']} before, {results['load_after']} after")


def _finite(value):
    """NaN (a run's first step has no previous one) as null, so the file is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    results: dict = {"config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
                     "host": {"python": platform.python_version(), "cpus": os.cpu_count()},
                     "load_before": load_note()}
    if not config.skip_trl:
        results["trl_version"] = trl_version()
    trl_runs: list[dict] = []
    ours_runs: dict[int, list[dict]] = {k: [] for k in config.max_staleness}
    with contextlib.ExitStack() as exits:
        stack = None
        if not config.skip_ours:
            stack = (Stack(scheduler=config.scheduler, pids={}) if config.scheduler
                     else exits.enter_context(private_stack(config)))
        for round_index in range(config.rounds):
            order = ("trl", "ours") if round_index % 2 == 0 else ("ours", "trl")
            for name in order:
                if name == "trl" and not config.skip_trl:
                    print(f"round {round_index + 1}: TRL", file=sys.stderr)
                    trl_runs.append(run_trl(config))
                elif name == "ours" and stack is not None:
                    for k in config.max_staleness:
                        print(f"round {round_index + 1}: ours, max_staleness {k}", file=sys.stderr)
                        ours_runs[k].append(run_ours(config, stack, k))
    if trl_runs:
        results["trl"] = summarize(trl_runs, config)
    if stack is not None:
        add_ours(results, summarize_ours(ours_runs, config))
    results["load_after"] = load_note()
    config.out.mkdir(parents=True, exist_ok=True)
    path = config.out / f"rl_step_vs_trl-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(_finite(results), indent=2) + "\n")
    print_table(results, config)
    print(f"results: {path}")
    return 0


def add_ours(results: dict, by_k: dict[str, dict]) -> None:
    """`ours_by_max_staleness` and `ratios` per k; `ours` and `ratio` repeat the first k's."""
    results["ours_by_max_staleness"] = by_k
    first = next(iter(by_k.values()))
    if "refused" not in first:
        results["ours"] = first
    if "trl" not in results:
        return
    trl_wall = results["trl"]["median"]["wall_s"]
    results["ratios"] = {k: side["median"]["wall_s"] / trl_wall for k, side in by_k.items()
                         if "refused" not in side}
    if "ours" in results:
        results["ratio"] = results["ratios"][next(iter(by_k))]


if __name__ == "__main__":
    sys.exit(main())
