"""Fault injection: `stack` (every process restartable, proxies on every port), `proxy`,
`faults` (the plan and the run) and `checks` (what a job that lived through faults must show)."""
