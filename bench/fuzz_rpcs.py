"""Hypothesis fuzzing of every RPC of the five services against a live stack (issue 10, full form).

    .venv/bin/python bench/fuzz_rpcs.py                          # 500 cases per RPC, 54 RPCs (~27,000 calls, ~7 min on 2 cores)
    .venv/bin/python bench/fuzz_rpcs.py --examples 50 --seed 7   # a quicker pass with another seed
    .venv/bin/python bench/fuzz_rpcs.py --only Sample --only OpenMatch --examples 2000
    .venv/bin/python bench/fuzz_rpcs.py --key tenant                # every RPC with an ordinary tenant's key

What runs, all on this machine: `opentinker up` in a private state directory on free ports
(harness/stack.py `LocalStack`: embedded Redis, the five services, auth on; this process calls
with the stack's admin key), the fixtures of harness/fuzz/targets.py (a tenant, a queued job,
a Trainer session, a Rollout policy, an EnvHost session, Coordinator matches), then, RPC after
RPC in the order of harness/fuzz/targets.rpcs_in_order, the valid examples and --examples
Hypothesis cases (harness/fuzz/rpcs.py: random messages from the descriptors, raw bytes, one-field
mutations of a valid request), each one real call. The oracle is the CI test's
(tests/chaos/test_fuzz_rpcs.py, 20 cases per RPC): only OK or canonical user codes,
INVALID_ARGUMENT naming a field of the request, and after each RPC's batch the service SERVING,
answering a known-good request, its process alive.

--key tenant calls with a key of the fixtures' tenant instead (harness/fuzz/tenant.py: its
own job and EnvHosts as the Scheduler examples' objects); the oracle then also fails any success of
a tenant key on an admin-only RPC (the CI test's tenant pass, 12 cases per RPC).

Prints a table (RPC, cases, failures, seconds, responses by code), then every failure with a
reproducer (protobuf text, hex for raw bytes); JSON in bench/results/fuzz_rpcs.json (--out).
Failures in code this work may not change (harness/fuzz/oracle.py KNOWN_FINDINGS, e.g. the EnvHost)
are listed as KNOWN. Exit status 1 on any oracle failure, KNOWN ones included unless
--ignore-known. Times are printed, never judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # harness/ holds the stack helper and the fuzzing library

from harness.fuzz.rpcs import RpcTally, all_rpcs, fuzz_rpc, summary_table  # noqa: E402
from harness.fuzz.targets import LiveTarget, pids_of, rpcs_in_order  # noqa: E402
from harness.fuzz.tenant import TenantTarget  # noqa: E402
from harness.stack import SERVICES, LocalStack  # noqa: E402
from harness.stack_spec import StackSpec  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "fuzz_rpcs.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=500, help="Hypothesis cases per RPC (default 500)")
    p.add_argument("--seed", type=int, default=20261122, help="Hypothesis seed (default: the CI test's)")
    p.add_argument("--only", action="append", default=[],
                   help="fuzz only RPCs whose name contains this (repeatable), e.g. Sample or TrainerService")
    p.add_argument("--key", choices=("admin", "tenant"), default="admin",
                   help="call with the stack's admin key (default) or an ordinary tenant's key")
    p.add_argument("--ignore-known", action="store_true",
                   help="exit 0 when the only failures are KNOWN_FINDINGS (reported, in code not changed here)")
    p.add_argument("--up-timeout", type=float, default=120.0,
                   help="seconds `opentinker up` waits for every service to be SERVING (default 120)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    args = p.parse_args(argv)
    if args.examples < 0:
        p.error("--examples must be >= 0")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fuzz(target: LiveTarget | TenantTarget, args: argparse.Namespace) -> list[RpcTally]:
    rpcs = [rpc for rpc in rpcs_in_order(all_rpcs()) if not args.only or any(o in rpc.name for o in args.only)]
    tallies = []
    for index, rpc in enumerate(rpcs, 1):
        tally = fuzz_rpc(target, rpc, max_examples=args.examples, seed=args.seed)
        codes = ", ".join(f"{code} {count}" for code, count in tally.codes.most_common())
        log(f"[{index}/{len(rpcs)}] {rpc.name}: {tally.total} cases, {len(tally.failures)} failures, "
            f"{len(tally.known)} known, "
            f"{tally.seconds:.1f} s ({codes})")
        for failure in tally.failures:
            log(f"    FAIL [{failure.case_kind}] {failure.problem}: {failure.details[:300]!r}")
        tallies.append(tally)
    return tallies


def report(tallies: list[RpcTally], target: LiveTarget, args: argparse.Namespace, seconds: float) -> int:
    print(summary_table(tallies))
    failures = [failure for tally in tallies for failure in tally.failures]
    known = [failure for tally in tallies for failure in tally.known]
    final_health = target.all_health_problems()
    for label, listed in (("FAIL", failures), ("KNOWN", known)):
        for failure in listed:
            print(f"\n{label} {failure.rpc} [{failure.case_kind}] {failure.problem}\n  details: {failure.details!r}"
                  f"\n  request: {failure.reproducer}")
    for problem in final_health:
        print(f"\nUNHEALTHY at the end: {problem}")
    print(f"\n{sum(t.total for t in tallies)} cases over {len(tallies)} RPCs in {seconds:.0f} s "
          f"(seed {args.seed}, {args.key} key, {args.examples} generated per RPC): {len(failures)} oracle failures, "
          f"{len(known)} known (reported, in code not changed here)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "seed": args.seed, "key": args.key, "examples_per_rpc": args.examples, "seconds": round(seconds, 1),
        "rpcs": [{"rpc": t.rpc, "cases": dict(t.cases), "codes": dict(t.codes), "seconds": round(t.seconds, 2),
                  "failures": [asdict(f) for f in t.failures], "known": [asdict(f) for f in t.known]}
                 for t in tallies],
        "final_health_problems": final_health}, indent=2) + "\n")
    return 1 if failures or final_health or (known and not args.ignore_known) else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-fuzz-") as state_dir:
        stack = LocalStack(Path(state_dir), StackSpec(dashboard=False))
        log(f"starting a private stack in {state_dir} ...")
        stack.up(timeout=args.up_timeout + 60)
        target = LiveTarget({name: stack.address(name) for name in SERVICES}, stack.api_key, pids_of(stack.status))
        try:
            target.setup()
            caller = target if args.key == "admin" else TenantTarget(target)
            if caller is not target:
                caller.setup()
            started = time.monotonic()
            tallies = fuzz(caller, args)
            return report(tallies, target, args, time.monotonic() - started)
        finally:
            target.close()
            stack.down()


if __name__ == "__main__":
    sys.exit(main())
