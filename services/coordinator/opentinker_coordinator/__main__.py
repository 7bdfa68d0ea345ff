"""`python -m opentinker_coordinator`."""

from opentinker_coordinator.main import main

if __name__ == "__main__":
    raise SystemExit(main())
