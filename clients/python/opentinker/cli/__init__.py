"""The `opentinker` command line: run and inspect the local stack (`up`, `status`, `down`).

Nothing here imports torch; the CLI must work on a laptop that only submits jobs.
"""
