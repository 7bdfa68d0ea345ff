"""Fault injection, full size: one RL job lives through >= 20 kills and more, and must finish
with exactly its optimizer steps.

Every service kind is killed (SIGKILL, then restarted like a supervisor would) --kills-per-service
times at random moments, Redis is killed and restarted from its append-only file --redis-restarts
times, and every open connection between services is reset --drops times, in a random order
(--seed). Prints each fault, the events that show it, and a summary: kills survived, optimizer
steps (Trainer and AdamW) against the requested ones, attempts, events, peak memory. Exits 1 if
the job did not succeed with exactly its steps.

    .venv/bin/python bench/chaos.py                        # 25 kills, 3 drops (~10 min on 2 cores)
    .venv/bin/python bench/chaos.py --kills-per-service 1  # a quick look
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentinker_api.scheduler.v1 import job_pb2  # noqa: E402
from harness.chaos.checks import evidence, prove_steps, sequences, summary, trained_steps  # noqa: E402
from harness.chaos.faults import plan_faults, run_with_faults, steps_for  # noqa: E402
from harness.chaos.stack import ChaosStack  # noqa: E402
from harness.job_specs import chaos_spec  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills-per-service", type=int, default=4, help="SIGKILLs of each of the 5 services")
    p.add_argument("--redis-restarts", type=int, default=5)
    p.add_argument("--drops", type=int, default=3, help="resets of every open connection between services")
    p.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    p.add_argument("--state-dir", type=Path, help="keep the stack's files here (default: a temp dir)")
    p.add_argument("--json", type=Path, help="also write the summary here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = random.Random(args.seed)
    faults = plan_faults(rng, kills_per_service=args.kills_per_service, redis_restarts=args.redis_restarts,
                         drops=args.drops)
    total_steps = steps_for(faults)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="ot-chaos-"))
    print(f"seed {args.seed}: {len(faults)} faults during a {total_steps}-step RL job; stack in {state_dir}")
    stack = ChaosStack(state_dir)
    stack.up()
    try:
        run = run_with_faults(stack, chaos_spec(total_steps), faults, rng, report=print)
        peaks = stack.peak_rss_mib()
        alive = stack.alive()
    finally:
        stack.down()
    for index, injected in enumerate(run.injected):
        shown = evidence(run, index)
        print(f"  {injected.fault.kind:5} {injected.fault.target:11} step {injected.step:3}: "
              f"{shown[0][:110] if shown else '(no event: nothing was in flight)'}")
    proof = prove_steps(run, stack.checkpoint_dir, total_steps)
    result = summary(run) | {
        "seed": args.seed, "state": job_pb2.Job.State.Name(run.final.state), "requested_steps": total_steps,
        "trainer_step": proof.trainer_step, "adam_steps": sorted(proof.adam_steps),
        "final_checkpoint_loads_and_matches": proof.final_matches_last_state,
        "steps_reported": len(trained_steps(run)), "gap_free_events": sequences(run) == list(range(1, len(run.events) + 1)),
        "processes_alive": alive, "peak_rss_mib": peaks,
        "bench_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    exact = proof.trainer_step == total_steps and proof.adam_steps == {total_steps}
    ok = (run.final.state == job_pb2.Job.STATE_SUCCEEDED and exact and proof.final_matches_last_state and result["gap_free_events"]
          and trained_steps(run) == set(range(1, total_steps + 1)) and all(alive.values()))
    print(f"kills survived: {result['kills']}; optimizer steps {proof.trainer_step}/{total_steps} "
          f"(AdamW {sorted(proof.adam_steps)}); attempts {run.final.attempt}; "
          f"{'OK' if ok else 'FAILED'} in {run.seconds:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
