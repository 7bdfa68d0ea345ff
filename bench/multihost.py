"""The cost of the network path: RL steps of one job with the stack spread over four "hosts"
(network namespaces: the Scheduler on one, the job's workers on another, its game on a tenant's
laptop EnvHost on a third, every call between them over a veth pair and a bridge) against the
same job on a one-host stack (`opentinker up`, everything on 127.0.0.1), in the same run.

    .venv/bin/python bench/multihost.py                 # 3 rounds of each, 6 steps a job (~6 min on 2 cores)
    .venv/bin/python bench/multihost.py --rounds 1 --steps 3
    .venv/bin/python bench/multihost.py --data-parallel  # 2 Trainer ranks: one per worker host vs both on one host

Needs root (namespaces). Both stacks are up at once; the rounds alternate between them. Per round:
seconds per optimizer step, from the first step's metrics event to the last (model loading and
the first step's warm-up excluded), for a tiny-llama GRPO job with LoRA (batch 4 x group 4, 16 new
tokens). Printed: each round's s/step, the medians, and the ratio multi-host / one host.

--data-parallel: the job asks for two Trainer devices. Each worker host's Trainer offers one, so
the multi-host job trains one rank on each host (gradients summed over the network); the
one-host stack's Trainer offers two (both ranks on 127.0.0.1). Full fine-tuning, so the ranks
exchange the whole model's gradients every step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.job_specs import TINY_LLAMA, builtin_model, lora, math_env, rl_spec, sampling_params  # noqa: E402
from harness.multihost import LAPTOP_ENVHOST, MultiHostStack  # noqa: E402
from harness.netns import available  # noqa: E402
from harness.stack import LocalStack  # noqa: E402
from harness.stack_spec import StackSpec  # noqa: E402


def job_spec(steps: int, envhost: str, data_parallel: bool = False) -> dict:
    environment = math_env(7) | ({"envhost": envhost} if envhost else {})
    spec = rl_spec(steps, name="multihost-bench", seed=7, model=builtin_model(TINY_LLAMA, 0),
                   adaptation=None if data_parallel else lora(rank=8, alpha=16),
                   sampling=sampling_params(max_new_tokens=16), environment=environment, batch_size=4,
                   group_size=4, eval_episodes=None, checkpoint_every_steps=None)
    if data_parallel:
        spec["resources"] = [{"role": "ROLE_TRAINER", "device_count": 2}, {"role": "ROLE_ROLLOUT", "device_count": 1}]
    return spec


def seconds_per_step(address: str, api_key: str, steps: int, envhost: str = "", data_parallel: bool = False) -> float:
    from opentinker.client import SchedulerClient
    from opentinker_api.scheduler.v1 import job_pb2

    stamps = []
    with SchedulerClient(address, api_key=api_key, timeout=60) as client:
        job_id = client.submit_job(job_spec(steps, envhost, data_parallel)).job_id
        for event in client.watch_job(job_id):
            if event.WhichOneof("payload") == "metrics" and "time/rollout_s" in event.metrics.values:
                stamps.append(time.perf_counter())
        final = client.get_job(job_id)
    if final.state != job_pb2.Job.STATE_SUCCEEDED or len(stamps) != steps:
        raise RuntimeError(f"job {job_id}: {job_pb2.Job.State.Name(final.state)} {final.status_message}")
    return (stamps[-1] - stamps[0]) / (steps - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--data-parallel", action="store_true",
                        help="two Trainer ranks: one on each worker host vs both on one host")
    args = parser.parse_args(argv)
    dp = args.data_parallel
    if not available():
        print("needs root: network namespaces and a bridge", file=sys.stderr)
        return 2
    state = Path(tempfile.mkdtemp(prefix="ot-multihost-bench-"))
    one_host = LocalStack(state / "one-host", StackSpec.of(dashboard=False, **(
        {"OPENTINKER_TRAINER_CPU_SLOTS": "2"} if dp else {})))
    results: dict[str, list[float]] = {"multi-host": [], "one host": []}
    with MultiHostStack(state / "multi-host") as spread:
        one_host.up(timeout=240)
        try:
            runs = {"multi-host": lambda: seconds_per_step(spread.address("scheduler"), spread.tenant_key, args.steps,
                                                           LAPTOP_ENVHOST, dp),
                    "one host": lambda: seconds_per_step(one_host.address("scheduler"), one_host.api_key, args.steps,
                                                         data_parallel=dp)}
            for name, measure in runs.items():  # untimed: each stack's first job loads its models
                measure()
            for round_index in range(args.rounds):
                order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
                for name in order:
                    results[name].append(runs[name]())
                    print(f"  round {round_index + 1} {name:10} {results[name][-1]:.3f} s/step", flush=True)
        finally:
            one_host.down()
    spread_s, local_s = statistics.median(results["multi-host"]), statistics.median(results["one host"])
    print(f"\n{'data-parallel, 2 ranks; ' if dp else ''}median s/step: multi-host {spread_s:.3f}, one host {local_s:.3f}; "
          f"ratio multi-host / one host {spread_s / local_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
