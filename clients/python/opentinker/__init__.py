"""OpenTinker: agentic reinforcement learning as a service. The SDK: what a laptop installs.

- `opentinker.client`: `ServiceClient` (jobs: submit, watch, results), `SchedulerClient`, the
  primitives (forward_backward, optim_step, sample) and the job spec builders.
- `opentinker.cli`: the `opentinker` command (run, watch, jobs, logs, admin; `up`/`down` start a
  local stack and need `opentinker[local]` and the services).
- `opentinker.dashboard`: the web dashboard over a Scheduler.

It stands on `opentinker_api` (the generated gRPC API) and `opentinker_env` (the environment
interface); it never imports torch, a service or, outside `up` and the dashboard's server,
`opentinker_runtime`.
"""

__version__ = "0.1.0"
