"""The main job: SFT warm-up -> GRPO RL -> held-out evaluation, through the local stack.

    opentinker up
    python examples/math_rl.py --out runs/math-seed1 --seed 1

Every stage is a job submitted to the Scheduler and driven by the Coordinator across the
Trainer, Rollout and EnvHost services:
  1. SFT: a built-in tiny model (randomly initialised) is warmed up on correct examples until
     its training loss reaches --target-loss: it has the answer format and a foothold on the
     skill (about a third of held-out problems right), whatever the seed;
  2. INFERENCE: held-out accuracy of the SFT checkpoint;
  3. RL: GRPO from the SFT checkpoint on the `math` environment: no labels, only the reward
     of the model's own answers to a stream of fresh problems;
  4. INFERENCE: held-out accuracy of the RL checkpoint.
The task is two-digit addition without carries ("23+45=" -> "68"): each answer digit depends
on one column, so what the model learns on training problems carries over to the held-out
ones, which it never sees in training. It prints the accuracies and writes the learning curve
as CSV and PNG, and summary.json, under --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from opentinker.cli.progress import JobProgressView
from opentinker.client import FitResult, SchedulerClient, ServiceClient
from opentinker_runtime.games.math_game import math_sft_examples


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    scheduler: str
    out: Path
    seed: int
    model: str
    digits: int
    carry: bool
    sft_examples: int
    sft_steps: int
    target_loss: float
    rl_steps: int
    batch_size: int
    group_size: int
    eval_episodes: int
    final_eval_episodes: int
    eval_every: int
    learning_rate: float
    rl_learning_rate: float
    max_new_tokens: int
    max_staleness: int = 0

    @property
    def game_config(self) -> dict:
        return {"seed": self.seed, "operations": "+", "min_digits": self.digits, "max_digits": self.digits,
                "carry": self.carry, "eval_size": max(self.eval_episodes, self.final_eval_episodes)}

    @property
    def environment(self) -> dict:
        return {"env_name": "math", "config": self.game_config}


def parse_args(argv: list[str] | None) -> DemoConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scheduler", default="127.0.0.1:50051")
    p.add_argument("--out", type=Path, default=Path("runs/math"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--digits", type=int, default=2, help="digits of each operand")
    p.add_argument("--carry", action=argparse.BooleanOptionalAction, default=False,
                   help="allow problems with carries (default: none)")
    p.add_argument("--sft-examples", type=int, default=8000, help="distinct SFT examples")
    p.add_argument("--sft-steps", type=int, default=900, help="SFT step cap")
    p.add_argument("--target-loss", type=float, default=0.8,
                   help="SFT stops once its 10-step mean loss is this low (0 = run all steps)")
    p.add_argument("--rl-steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--eval-episodes", type=int, default=64,
                   help="held-out problems each evaluation during RL plays (the curve)")
    p.add_argument("--final-eval-episodes", type=int, default=256,
                   help="held-out problems the SFT and RL checkpoints are scored on (greedy); 256 "
                        "puts the standard error of an accuracy near 0.8 at 0.025 (64: 0.05)")
    p.add_argument("--eval-every", type=int, default=25, help="RL steps between held-out evals")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--rl-learning-rate", type=float, default=3e-4)
    p.add_argument("--max-new-tokens", type=int, default=6)
    p.add_argument("--max-staleness", type=int, default=0,
                   help="RL job's async.max_staleness: 0 = synchronous; k >= 1 = rollouts k steps ahead")
    a = p.parse_args(argv)
    return DemoConfig(**{k: v for k, v in vars(a).items()})


def write_sft_data(config: DemoConfig) -> Path:
    path = config.out / "sft.jsonl"
    examples = math_sft_examples(config.sft_examples, **config.game_config)
    path.write_text("".join(json.dumps(e) + "\n" for e in examples))
    return path


def follow(client: ServiceClient, job_id: str, title: str) -> FitResult:
    print(f"== {title}: job {job_id}", file=sys.stderr)
    view = JobProgressView()
    result = client.follow(job_id, on_event=view.on_event)
    view.close()
    if not result.succeeded:
        raise SystemExit(f"{title} failed: {result.job.status_message}")
    return result


def sft_spec(config: DemoConfig, data: Path) -> dict:
    return {
        "type": "SFT", "display_name": "math SFT warm-up",
        "policy": {"model": {"builtin": {"name": config.model, "seed": config.seed}}, "adaptation": {"full": {}},
                   "algorithm": {"optimizer": {"learning_rate": config.learning_rate, "max_grad_norm": 1.0}}},
        "dataset": {"path": str(data.resolve())},
        "training": {"total_steps": config.sft_steps, "batch_size": config.batch_size, "seed": config.seed,
                     "target_loss": config.target_loss},
    }


def rl_spec(config: DemoConfig, checkpoint_id: str) -> dict:
    return {
        "type": "RL", "display_name": "math GRPO",
        "policy": {
            "model": {"checkpoint": {"checkpoint_id": checkpoint_id}}, "adaptation": {"full": {}},
            "algorithm": {"optimizer": {"learning_rate": config.rl_learning_rate, "max_grad_norm": 1.0},
                          "loss": {"function": "PPO_CLIP", "aggregation": "TOKEN_MEAN", "clip_low": 0.2,
                                   "clip_high": 0.2},
                          "advantage": {"estimator": "GRPO", "normalize_by_std": True}},
            "sampling": {"max_new_tokens": config.max_new_tokens, "temperature": 1.0},
        },
        "environment": config.environment,
        "training": {"total_steps": config.rl_steps, "batch_size": config.batch_size,
                     "group_size": config.group_size, "eval_every_steps": config.eval_every,
                     "eval_episodes": config.eval_episodes, "seed": config.seed},
        "async": {"max_staleness": config.max_staleness},
    }


def inference_spec(config: DemoConfig, checkpoint_id: str, name: str) -> dict:
    return {
        "type": "INFERENCE", "display_name": f"math eval {name}",
        "policy": {"model": {"checkpoint": {"checkpoint_id": checkpoint_id}},
                   "sampling": {"max_new_tokens": config.max_new_tokens}},
        "environment": config.environment,
        "inference": {"num_episodes": config.final_eval_episodes,
                      "output_path": str((config.out / f"eval-{name}.jsonl").resolve())},
        "training": {"seed": config.seed},
    }


def evaluate(client: ServiceClient, scheduler: SchedulerClient, config: DemoConfig,
             checkpoint_id: str, name: str) -> float:
    job = scheduler.submit_job(inference_spec(config, checkpoint_id, name))
    result = follow(client, job.job_id, f"evaluate {name}")
    return result.series("eval/accuracy")[-1][1]


def write_curve(result: FitResult, out: Path) -> tuple[Path, Path]:
    names = sorted({k for _, values in result.history for k in values})
    csv_path, png_path = out / "learning_curve.csv", out / "learning_curve.png"
    with csv_path.open("w", newline="") as sink:
        writer = csv.writer(sink)
        writer.writerow(["step", *names])
        for step, values in result.history:
            writer.writerow([step, *(values.get(n, "") for n in names)])
    plot_curve(result, png_path)
    return csv_path, png_path


def plot_curve(result: FitResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for name, label in (("reward/mean", "train reward"), ("eval/accuracy", "held-out accuracy")):
        points = result.series(name)
        if points:
            axis.plot([s for s, _ in points], [v for _, v in points], marker="o", markersize=3, label=label)
    axis.set_xlabel("RL step")
    axis.set_ylim(-0.02, 1.02)
    axis.set_title("GRPO on math (tiny model, CPU)")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    config.out.mkdir(parents=True, exist_ok=True)
    client, scheduler = ServiceClient(config.scheduler), SchedulerClient(config.scheduler)
    started = time.perf_counter()
    sft_job = scheduler.submit_job(sft_spec(config, write_sft_data(config)))
    sft = follow(client, sft_job.job_id, "SFT warm-up")
    sft_accuracy = evaluate(client, scheduler, config, sft.final_checkpoint_id, "sft")
    rl_started = time.perf_counter()
    rl_job = scheduler.submit_job(rl_spec(config, sft.final_checkpoint_id))
    rl = follow(client, rl_job.job_id, "GRPO RL")
    rl_seconds = time.perf_counter() - rl_started
    rl_accuracy = evaluate(client, scheduler, config, rl.final_checkpoint_id, "rl")
    csv_path, png_path = write_curve(rl, config.out)
    summary = {"seed": config.seed, "sft_accuracy": sft_accuracy, "rl_accuracy": rl_accuracy,
               "gain": rl_accuracy - sft_accuracy, "rl_seconds": round(rl_seconds, 1),
               "total_seconds": round(time.perf_counter() - started, 1),
               "curve_csv": str(csv_path), "curve_png": str(png_path)}
    (config.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
