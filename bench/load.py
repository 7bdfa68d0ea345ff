"""Load on a live local stack: 256 EnvHost sessions, 1,000 queued jobs, 50 watchers of one job.

    .venv/bin/python bench/load.py               # 5 rounds of 256 sessions x 6 steps, 1,000 jobs, 50 watchers (~4 min)
    .venv/bin/python bench/load.py --quick       # 2 rounds of 64 sessions x 3 steps, 100 jobs, 10 watchers (~1 min)
    .venv/bin/python bench/load.py --rounds 10 --only sessions

What runs, all on this machine: `opentinker up` in a private state directory on free ports
(harness/stack.py `LocalStack`: embedded Redis, the five services, auth on, this process using
the stack's admin key), and in this process the loads of harness/load, one after the
other in every round (so a service's memory belongs to one load at a time):

1. sessions: --sessions guess_number sessions all open at once on the EnvHost, --steps steps
   each, every answer checked against the session's own secret (no cross-talk), half over unary
   calls on one channel, half multiplexed on --streams Interact streams; then all closed and the
   EnvHost's open-sessions gauge back to 0. With --sessions equal to the EnvHost's max_sessions
   (256 by default) one more OpenSession must be refused (RESOURCE_EXHAUSTED).
2. jobs: --jobs jobs for a fresh tenant whose quota is exactly --jobs queued jobs, each asking
   for 64 trainer devices on one worker (none has them: they stay QUEUED, nothing trains), from
   --concurrency clients at once; one more is refused; every job listed (ListJobs pages) and
   QUEUED with its first event (GetJob); all cancelled; every job listed CANCELLED and its
   events replayed (exactly QUEUED, CANCELLED).
3. watchers: one tiny RL job (--job-steps steps) with --watchers WatchJob streams from its
   submission, each on its own channel, plus two that hang up (after 2 and 5 events) and
   resume with after_sequence: all must get the identical gap-free sequence 1..last.

Memory: PSS of every service's process plus its children (the EnvHost's game processes under
process isolation share most pages with their fork server, so RSS would count them many times),
its own RSS, and its open file descriptors, from /proc, sampled about every 0.1 s while a round
runs (peaks; less often while hundreds of game processes are up) and at the end of each round.
The first round is the warm-up; "growth" is the highest end-of-round PSS after it minus the
warm-up's. EnvHost and Scheduler growth must stay under --rss-bound-mib (harness/load
RSS_BOUND_MIB says why 8 MiB); the other services run the watched RL job and are reported only.

Results: a table on stdout, progress on stderr, JSON in bench/results/load.json (--out). Exit
status 1 on any lost job or event, any other problem the loads found, a service that died, or
growth beyond the bound. Times are printed, never judged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # harness/ holds the stack helper and the load library

from harness.load import (  # noqa: E402
    RSS_BOUND_MIB,
    JobsReport,
    MemoryTrend,
    MiB,
    ProcessProbe,
    SessionsReport,
    WatchersReport,
    queued_jobs_load,
    sampling,
    sessions_load,
    watchers_load,
)
from harness.stack import SERVICES, LocalStack  # noqa: E402
from harness.stack_spec import StackSpec  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "load.json"
LOADS = ("sessions", "jobs", "watchers")
JUDGED = {"sessions": "envhost", "jobs": "scheduler", "watchers": "scheduler"}


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    sessions: int
    steps: int
    streams: int
    jobs: int
    concurrency: int
    check_every: int
    watchers: int
    job_steps: int
    rounds: int
    only: tuple[str, ...]
    rss_bound_mib: float
    up_timeout: float
    out: Path


def parse_args(argv: list[str] | None) -> BenchConfig:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, help="EnvHost sessions open at once (default 256; 64 with --quick)")
    p.add_argument("--steps", type=int, help="steps per session (default 6; 3 with --quick), at most 64")
    p.add_argument("--streams", type=int, default=8, help="Interact streams the odd sessions share (default 8)")
    p.add_argument("--jobs", type=int, help="queued jobs per round (default 1000; 100 with --quick)")
    p.add_argument("--concurrency", type=int, default=16, help="job RPCs in flight at once (default 16)")
    p.add_argument("--check-every", type=int, default=1,
                   help="read every Nth queued job with GetJob and replay its events (default 1: all)")
    p.add_argument("--watchers", type=int, help="WatchJob streams on one job (default 50; 10 with --quick)")
    p.add_argument("--job-steps", type=int, default=2, help="training steps of the watched job (default 2)")
    p.add_argument("--rounds", type=int, help="rounds, the first a warm-up (default 5; 2 with --quick)")
    p.add_argument("--only", action="append", choices=LOADS, help="run only this load (repeatable)")
    p.add_argument("--rss-bound-mib", type=float, default=RSS_BOUND_MIB,
                   help=f"largest RSS growth after the warm-up round (default {RSS_BOUND_MIB})")
    p.add_argument("--up-timeout", type=float, default=120.0,
                   help="seconds `opentinker up` waits for every service to be SERVING (default 120)")
    p.add_argument("--quick", action="store_true", help="a smoke run: small numbers, 2 rounds")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    a = p.parse_args(argv)

    def pick(value: int | None, full: int, quick: int) -> int:
        return value if value is not None else (quick if a.quick else full)
    config = BenchConfig(sessions=pick(a.sessions, 256, 64), steps=pick(a.steps, 6, 3), streams=a.streams,
                         jobs=pick(a.jobs, 1000, 100), concurrency=a.concurrency, check_every=a.check_every,
                         watchers=pick(a.watchers, 50, 10), job_steps=a.job_steps, rounds=pick(a.rounds, 5, 2),
                         only=tuple(a.only or LOADS), rss_bound_mib=a.rss_bound_mib, up_timeout=a.up_timeout,
                         out=a.out)
    if min(config.sessions, config.steps, config.streams, config.jobs, config.concurrency, config.check_every,
           config.watchers,
           config.job_steps, config.rounds) < 1 or config.steps > 64:
        p.error("every count must be >= 1, and --steps <= 64")
    return config


@dataclass(kw_only=True)
class Round:
    index: int
    sessions: SessionsReport | None = None
    jobs: JobsReport | None = None
    watchers: WatchersReport | None = None
    seconds: float = 0.0

    def problems(self) -> list[str]:
        reports = [r for r in (self.sessions, self.jobs, self.watchers) if r is not None]
        return [f"round {self.index}: {problem}" for r in reports for problem in r.problems]


@dataclass(kw_only=True)
class Run:
    config: BenchConfig
    rounds: list[Round] = field(default_factory=list)
    trends: dict[str, MemoryTrend] = field(default_factory=dict)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def one_round(index: int, stack: LocalStack, config: BenchConfig, probes: dict[str, ProcessProbe],
                    trends: dict[str, MemoryTrend]) -> Round:
    result, started = Round(index=index), time.monotonic()
    metrics = {p["name"]: p.get("metrics_url", "") for p in stack.status["processes"]}
    async with sampling(probes, trends):
        if "sessions" in config.only:
            result.sessions = await sessions_load(
                stack.address("envhost"), stack.api_key, sessions=config.sessions, steps=config.steps,
                streams=config.streams, metrics_url=metrics["envhost"], envhost_pid=probes["envhost"].pid,
                probe_limit=config.sessions == 256, seed=index)
            log(f"  sessions: {result.sessions.steps_ok} steps in {result.sessions.seconds:.1f} s, "
                f"{len(result.sessions.problems)} problems")
        if "jobs" in config.only:
            result.jobs = await queued_jobs_load(stack.address("scheduler"), stack.api_key, jobs=config.jobs,
                                                 concurrency=config.concurrency, check_every=config.check_every)
            log(f"  jobs: {result.jobs.submitted} submitted at {result.jobs.submits_per_s:.0f}/s, "
                f"{result.jobs.phase_seconds}, {result.jobs.lost} lost")
        if "watchers" in config.only:
            result.watchers = await watchers_load(stack.address("scheduler"), stack.api_key, watchers=config.watchers,
                                                  metrics_url=metrics["scheduler"], total_steps=config.job_steps)
            log(f"  watchers: {result.watchers.identical_watchers}/{config.watchers} complete and identical, "
                f"{result.watchers.events} events, {result.watchers.seconds:.1f} s")
    result.seconds = time.monotonic() - started
    return result


async def run_rounds(stack: LocalStack, config: BenchConfig) -> Run:
    run = Run(config=config)
    pids = {p["name"]: p["pid"] for p in stack.status["processes"] if p["name"] in SERVICES}
    probes = {name: ProcessProbe(pid) for name, pid in pids.items()}
    run.trends = {name: MemoryTrend(name=name) for name in probes}
    for index in range(config.rounds):
        log(f"round {index + 1}/{config.rounds}{' (warm-up)' if index == 0 else ''} ...")
        run.rounds.append(await one_round(index, stack, config, probes, run.trends))
    return run


def judged_services(config: BenchConfig) -> list[str]:
    return sorted({JUDGED[load] for load in config.only})


def failures(run: Run) -> list[str]:
    problems = [p for r in run.rounds for p in r.problems()]
    bound = run.config.rss_bound_mib * MiB
    for name, trend in run.trends.items():
        if any(not s.alive for s in trend.rounds):
            problems.append(f"{name} died during the load")
        if name in judged_services(run.config) and not trend.flat(int(bound)):
            problems.append(f"{name} RSS grew {trend.growth_bytes / MiB:.1f} MiB after the warm-up round "
                            f"(bound {run.config.rss_bound_mib:g} MiB): {trend.per_round_mib}")
    return problems


def _total(run: Run, load: str, attr: str) -> float:
    return sum(getattr(getattr(r, load), attr) for r in run.rounds if getattr(r, load) is not None)


def print_summary(run: Run) -> None:
    c, rounds = run.config, len(run.rounds)
    rows = []
    if "sessions" in c.only:
        rows += [("sessions served (all open at once)", f"{_total(run, 'sessions', 'closed'):.0f} "
                  f"({c.sessions} x {rounds} rounds)"),
                 ("steps answered, each checked", f"{_total(run, 'sessions', 'steps_ok'):.0f}"),
                 ("session-load seconds per round", _per_round(run, "sessions", "seconds"))]
    if "jobs" in c.only:
        rows += [("jobs submitted / listed QUEUED / cancelled", " / ".join(
                    f"{_total(run, 'jobs', a):.0f}" for a in ("submitted", "queued_seen", "cancelled"))),
                 ("jobs read QUEUED (GetJob) / events replayed", " / ".join(
                    f"{_total(run, 'jobs', a):.0f}" for a in ("got_queued", "events_checked"))),
                 ("lost jobs", f"{_total(run, 'jobs', 'lost'):.0f}"),
                 ("submits/s per round", _per_round(run, "jobs", "submits_per_s"))]
    if "watchers" in c.only:
        rows += [("watchers complete and identical", f"{_total(run, 'watchers', 'identical_watchers'):.0f} "
                  f"of {c.watchers * rounds}"),
                 ("events per watcher per round", _per_round(run, "watchers", "events")),
                 ("resumed watchers exact", f"{_total(run, 'watchers', 'resumed_ok'):.0f} of {2 * rounds}"),
                 ("lost or duplicated events", f"{_total(run, 'watchers', 'lost_events'):.0f}")]
    width = max(len(label) for label, _ in rows)
    print(f"\nload on a local stack, {rounds} rounds (the first a warm-up)")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print_memory(run)


def _per_round(run: Run, load: str, attr: str) -> str:
    return ", ".join(f"{getattr(getattr(r, load), attr):.1f}" for r in run.rounds if getattr(r, load) is not None)


def print_memory(run: Run) -> None:
    """Memory = PSS of the service and its child processes (games under process isolation)."""
    judged = judged_services(run.config)
    print(f"\n{'service':<12} {'peak MiB':>9} {'(children)':>10} {'own RSS MiB':>12} {'growth MiB':>10} "
          f"{'fds':>9}  end-of-round MiB")
    for name, trend in run.trends.items():
        first, last = trend.rounds[0], trend.rounds[-1]
        mark = "" if name not in judged else ("  flat" if trend.flat(int(run.config.rss_bound_mib * MiB)) else "  GREW")
        print(f"{name:<12} {trend.peak_bytes / MiB:>9.1f} {trend.peak_children:>10} "
              f"{first.rss_bytes / MiB:>5.0f}->{last.rss_bytes / MiB:<5.0f} {trend.growth_bytes / MiB:>10.1f} "
              f"{first.open_fds:>4}->{last.open_fds:<4}  {trend.per_round_mib}{mark}")


def results_json(run: Run, problems: list[str]) -> dict[str, Any]:
    def report(r: Any) -> Any:
        if r is None:
            return None
        data = asdict(r)
        data.pop("lost_ids", None)
        return data | {k: getattr(r, k) for k in ("submits_per_s", "lost", "lost_events") if hasattr(r, k)}
    return {
        "ok": not problems, "problems": problems,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(run.config).items()},
        "rounds": [{"index": r.index, "seconds": r.seconds, "sessions": report(r.sessions), "jobs": report(r.jobs),
                    "watchers": report(r.watchers)} for r in run.rounds],
        "memory": {name: {"peak_mib": t.peak_bytes / MiB, "peak_children": t.peak_children,
                          "growth_mib": t.growth_bytes / MiB,
                          "rounds": [asdict(s) for s in t.rounds]} for name, t in run.trends.items()},
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    for name in [n for n in os.environ if n.startswith("OPENTINKER_")]:
        del os.environ[name]  # the stack gets its own key and settings, not the caller's
    with tempfile.TemporaryDirectory(prefix="opentinker-load-") as state_dir:
        stack = LocalStack(Path(state_dir), StackSpec(dashboard=False))
        log("starting the local stack ...")
        stack.up(timeout=config.up_timeout + 60)
        try:
            run = asyncio.run(run_rounds(stack, config))
        finally:
            stack.down()
    problems = failures(run)
    print_summary(run)
    config.out.parent.mkdir(parents=True, exist_ok=True)
    config.out.write_text(json.dumps(results_json(run, problems), indent=2, default=str) + "\n")
    print(f"\nresults: {config.out}")
    if problems:
        print(f"FAILED ({len(problems)} problems):\n  " + "\n  ".join(problems[:50]), file=sys.stderr)
        return 1
    print("PASS: no lost job, no lost or duplicated event, memory flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())
