"""`python -m opentinker_rollout`."""

from opentinker_rollout.main import main

if __name__ == "__main__":
    raise SystemExit(main())
