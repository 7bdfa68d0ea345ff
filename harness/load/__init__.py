"""Load against a live stack: many EnvHost sessions, many queued jobs, many watchers of one job.

Shared by tests/chaos/test_load.py (bounded, in CI) and bench/load.py (full size, a printed
summary). Everything goes through the real services over real sockets, with the stack's admin
key. Each load function returns a report whose `problems` lists every lost, duplicated or
mismatched item it found (empty = nothing lost), with counts to print; none of them raises on
a finding, so a bench can report all of them.

* `sessions_load`: N EnvHost sessions of `guess_number`, all open at once, each in a number
  range of its own (session i guesses in 100*i+1..100*i+64), stepped concurrently: half over
  unary calls on one channel (like the Rollout), half multiplexed on a few Interact streams.
  The secret of every session is computed locally from the same game class, so every answer is
  checked exactly (the hint, the echoed guess, `done` only on the last step, the secret at the
  end): an answer meant for another session cannot pass. Then every session is closed (its step
  count must match), the EnvHost's open-sessions gauge must come back to 0 and its child
  processes (games under process isolation) to as many as before. Works with either isolation.
* `queued_jobs_load`: N jobs for a fresh tenant whose quota allows exactly N queued, each asking
  64 trainer devices on one worker (no worker here has them, so they stay QUEUED and nothing
  trains): submit, the (N+1)th refused, every job listed QUEUED (ListJobs pages), GetJob, cancel
  all, all listed CANCELLED, their events replayed (exactly QUEUED then CANCELLED).
* `watchers_load`: one short real RL job (tiny model) with W WatchJob streams from the start,
  each on its own channel; all must see the same gap-free sequence 1..last ending in SUCCEEDED,
  and a watcher that hangs up and resumes with after_sequence must get exactly the rest.
* `ProcessProbe` / `MemoryTrend`: memory (PSS of the process and its children) and open file
  descriptors of a service, sampled during and after each round; "flat" = after a warm-up round
  the end-of-round memory grows less than RSS_BOUND_MIB.

The loads live in `harness.load.sessions`, `.jobs` and `.watchers`, the probes in `.probes`,
the shared constants in `.base`; this package is what callers import.
"""

from harness.load.base import RSS_BOUND_MIB, MiB
from harness.load.jobs import JobsReport, queued_jobs_load
from harness.load.probes import MemoryTrend, ProcessProbe, sampling
from harness.load.sessions import SessionsReport, sessions_load
from harness.load.watchers import WatchersReport, watchers_load

__all__ = ["RSS_BOUND_MIB", "JobsReport", "MemoryTrend", "MiB", "ProcessProbe", "SessionsReport",
           "WatchersReport", "queued_jobs_load", "sampling", "sessions_load", "watchers_load"]
