"""Many LoRA jobs on one base: N RL jobs submitted at once through the Scheduler onto one Trainer
and one Rollout, with the base shared (one frozen copy, ForwardBackward in cycles) against the
same N jobs with one base copy per session, in the same run.

    .venv/bin/python bench/multi_lora.py                      # tiny-llama and small-llama (~30M), N = 1, 4, 8 (~15 min on 2 cores)
    .venv/bin/python bench/multi_lora.py --quick              # tiny-llama, N = 1, 2, 1 step: a smoke run (~2 min)
    .venv/bin/python bench/multi_lora.py --models small-llama --counts 1 8

What runs: for each mode, one local stack (`opentinker up`, no dashboard; all of them up at once,
each warmed up by one untimed 1-step job) whose Trainer and Rollout offer `max(counts)` CPU
slots, so every job of a round runs at once:

* `shared`: the Trainer's defaults (share_lora_base on: LoRA sessions of one base stand on one
  frozen copy, their ForwardBackward calls run as one batched forward/backward per cycle);
* `copies`: OPENTINKER_TRAINER_SHARE_LORA_BASE=false, each session loads its own base and
  trains alone (what the Trainer did before);
* `shared-nowait` (only with --modes): shared with cycle_gather_ms 0 (a cycle takes what queued
  while the last one ran, never waits).

Each (model, N) runs once per mode, the modes back to back in an order that rotates from one
(model, N) to the next.
A round submits N RL jobs (GRPO on the built-in math game, LoRA rank 8 on every linear layer,
`--steps` optimizer steps, batch 4 x group 4, 16 new tokens, each job its own seed) at once
and waits until all have SUCCEEDED. Aggregate steps/s = N x steps / (the last job's end - the
submission). Trainer memory is the Trainer process's peak resident memory during the round
(VmHWM, reset before it), and its growth over the idle Trainer's (what the sessions cost). From
the Trainer's /metrics: the round's joint cycles and mean sessions per cycle.

Printed per model and N: both modes' steps/s and memory, and the ratios shared / copies (steps/s)
and shared N / shared 1 (memory). The issue's targets: at N = 8, steps/s >= 3 x copies', and
trainer memory <= 1.5 x one session's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.job_specs import builtin_model, lora, math_env, rl_spec, sampling_params  # noqa: E402
from harness.stack import LocalStack  # noqa: E402
from harness.stack_spec import StackSpec  # noqa: E402

MODES = {"shared": {"OPENTINKER_TRAINER_SHARE_LORA_BASE": "true"},
         "copies": {"OPENTINKER_TRAINER_SHARE_LORA_BASE": "false"},
         "shared-nowait": {"OPENTINKER_TRAINER_SHARE_LORA_BASE": "true", "OPENTINKER_TRAINER_CYCLE_GATHER_MS": "0"}}


@dataclass(frozen=True, kw_only=True)
class Round:
    model: str
    mode: str
    jobs: int
    steps_per_s: float
    seconds: float
    trainer_peak_mib: float
    trainer_growth_mib: float
    states: tuple[str, ...]
    joint_cycles: int
    """Cycles in which several sessions' calls ran as one batched pass (0 in `copies`)."""
    mean_occupancy: float
    """Mean sessions per cycle (1.0 when every call ran alone; 0 when no cycle ran)."""
    cpu_seconds: dict[str, float]
    """CPU time (user + system) each of the stack's services used during the round."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tiny-llama", "small-llama"])
    p.add_argument("--counts", nargs="+", type=int, default=[1, 4, 8])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--modes", nargs="+", choices=sorted(MODES), default=["shared", "copies"])
    p.add_argument("--quick", action="store_true", help="tiny-llama, N = 1 and 2, 1 step")
    p.add_argument("--json", type=Path, help="also write the rounds here")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.counts, args.steps = ["tiny-llama"], [1, 2], 1
    return args


def job_spec(model: str, steps: int, seed: int) -> dict:
    return rl_spec(steps, name=f"multi-lora-{seed}", seed=seed, model=builtin_model(model, 0),
                   adaptation=lora(rank=8, alpha=16), sampling=sampling_params(max_new_tokens=16),
                   environment=math_env(seed), batch_size=4, group_size=4, eval_episodes=None,
                   checkpoint_every_steps=None)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (its reaped children's too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def service_cpu(stack: LocalStack) -> dict[str, float]:
    return {p["name"]: cpu_seconds(p["pid"]) for p in stack.status["processes"] if p.get("pid")}


def cycle_counters(metrics_url: str) -> tuple[float, float, float]:
    """(joint cycles, the sum and the count of the cycle-occupancy histogram) from the Trainer's
    Prometheus endpoint."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    values = {"joint": 0.0, "sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        if line.startswith('opentinker_trainer_cycles_total{kind="joint"}'):
            values["joint"] = float(line.split()[-1])
        elif line.startswith("opentinker_trainer_cycle_sessions_sum"):
            values["sum"] = float(line.split()[-1])
        elif line.startswith("opentinker_trainer_cycle_sessions_count"):
            values["count"] = float(line.split()[-1])
    return values["joint"], values["sum"], values["count"]


def run_round(stack: LocalStack, trainer_pid: int, model: str, mode: str, count: int, steps: int) -> Round:
    from opentinker.client import SchedulerClient
    from opentinker_api.scheduler.v1 import job_pb2

    metrics_url = next(p["metrics_url"] for p in stack.status["processes"] if p["name"] == "trainer")
    before = cycle_counters(metrics_url)
    cpu_before = service_cpu(stack)
    idle_kib = status_kib(trainer_pid, "VmRSS")
    reset_peak(trainer_pid)
    with SchedulerClient(stack.address("scheduler"), api_key=stack.api_key) as client:
        started = time.perf_counter()
        ids = [client.submit_job(job_spec(model, steps, seed)).job_id for seed in range(count)]
        finals = [client.wait(job_id) for job_id in ids]
        seconds = time.perf_counter() - started
    peak_kib = status_kib(trainer_pid, "VmHWM")
    after = cycle_counters(metrics_url)
    cpu_after = service_cpu(stack)
    cycles = after[2] - before[2]
    states = tuple(job_pb2.Job.State.Name(job.state) for job in finals)
    for job in finals:
        if job.state != job_pb2.Job.STATE_SUCCEEDED:
            print(f"  job {job.job_id} {job_pb2.Job.State.Name(job.state)}: {job.status_message}", flush=True)
    return Round(model=model, mode=mode, jobs=count, steps_per_s=count * steps / seconds, seconds=seconds,
                 trainer_peak_mib=peak_kib / 1024, trainer_growth_mib=(peak_kib - idle_kib) / 1024, states=states,
                 joint_cycles=int(after[0] - before[0]), mean_occupancy=(after[1] - before[1]) / cycles if cycles else 0.0,
                 cpu_seconds={name: round(cpu_after[name] - cpu_before[name], 1) for name in cpu_after if name in cpu_before})


def start_stack(mode: str, slots: int, state_dir: Path) -> tuple[LocalStack, int]:
    """The mode's stack, up, and its Trainer's pid."""
    spec = StackSpec.of(dashboard=False, OPENTINKER_TRAINER_CPU_SLOTS=str(slots),
                        OPENTINKER_ROLLOUT_CPU_SLOTS=str(slots), **MODES[mode])
    stack = LocalStack(state_dir / mode, spec)
    stack.up(timeout=240)
    return stack, next(p["pid"] for p in stack.status["processes"] if p["name"] == "trainer")


def run_all(args: argparse.Namespace, state_dir: Path) -> list[Round]:
    """Every mode's stack up at once; each (model, N) runs once per mode, the modes back to back
    in an order that rotates from one (model, N) to the next, so a drift in the machine's load
    hits every mode alike."""
    stacks = {}
    try:
        for mode in args.modes:
            stacks[mode] = start_stack(mode, max(args.counts), state_dir)
        for mode, (stack, pid) in stacks.items():  # untimed: a fresh stack's first job warms it up
            run_round(stack, pid, args.models[0], mode, 1, 1)
        rounds = []
        turn = 0
        for model in args.models:
            for count in args.counts:
                order = args.modes[turn % len(args.modes):] + args.modes[:turn % len(args.modes)]
                turn += 1
                for mode in order:
                    stack, pid = stacks[mode]
                    done = run_round(stack, pid, model, mode, count, args.steps)
                    print(f"  {mode:13} {model:11} N={count}: {done.steps_per_s:.3f} steps/s ({done.seconds:.1f} s), "
                          f"trainer peak {done.trainer_peak_mib:.0f} MiB (+{done.trainer_growth_mib:.0f}), "
                          f"{done.joint_cycles} joint cycles, {done.mean_occupancy:.2f} sessions/cycle "
                          f"{set(done.states)}", flush=True)
                    print(f"{'':16}CPU s: " + ", ".join(f"{k} {v:.1f}" for k, v in done.cpu_seconds.items()), flush=True)
                    rounds.append(done)
        return rounds
    finally:
        for stack, _ in stacks.values():
            stack.down()


def report(rounds: list[Round]) -> bool:
    """The table (shared against copies); whether every job succeeded."""
    by = {(r.model, r.mode, r.jobs): r for r in rounds}
    print(f"\n{'model':11} {'N':>3} {'shared steps/s':>15} {'copies steps/s':>15} {'ratio':>6} "
          f"{'shared MiB (+)':>15} {'copies MiB (+)':>15} {'mem vs N=1':>10}")
    for (model, mode, count), shared in sorted(by.items()):
        if mode != "shared" or (model, "copies", count) not in by:
            continue
        copies = by[(model, "copies", count)]
        one = by.get((model, "shared", 1))
        memory = f"{shared.trainer_peak_mib / one.trainer_peak_mib:.2f}x" if one else "-"
        print(f"{model:11} {count:>3} {shared.steps_per_s:>15.3f} {copies.steps_per_s:>15.3f} "
              f"{shared.steps_per_s / copies.steps_per_s:>5.2f}x "
              f"{shared.trainer_peak_mib:>8.0f} (+{shared.trainer_growth_mib:>4.0f}) "
              f"{copies.trainer_peak_mib:>8.0f} (+{copies.trainer_growth_mib:>4.0f}) {memory:>10}")
    return all(state == "STATE_SUCCEEDED" for r in rounds for state in r.states)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state_dir = Path(tempfile.mkdtemp(prefix="ot-multi-lora-"))
    rounds = run_all(args, state_dir)
    ok = report(rounds)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rounds], indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
