"""What the tests and the benches share: local stacks and the tools that drive them.

`tests/` and `bench/` both import this package; it imports neither. Modules:

* `harness.stack`: `LocalStack`, the real `opentinker up` in a private state dir on free ports,
  and the helpers around it (`free_ports`, `run_cli`, `second_service`, `stack_pids`).
* `harness.stack_spec`: `StackSpec`, what makes one stack differ from another (dashboard,
  gateway, the OPENTINKER_* settings its processes get). Stacks get their settings from their
  spec, never from edits of the test process's `os.environ`.
* `harness.stack_pool`: `StackPool`, stacks keyed by spec: equal specs share one stack.
* `harness.job_specs`: the small job specs (RL, SFT, inference) stack-level tests submit.
* `harness.chaos`: a stack whose every process can be killed and restarted, behind proxies that
  cut connections, and the fault plan and proofs of a job that lived through faults.
* `harness.fuzz`: fuzzing every RPC of the five services against a live stack.
* `harness.load`: loads (many sessions, many queued jobs, many watchers) and memory probes.

Run from the repository root (pytest.ini puts it on sys.path; each bench script inserts it).
"""
