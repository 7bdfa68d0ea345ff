"""`python -m opentinker_scheduler`."""

from opentinker_scheduler.main import main

if __name__ == "__main__":
    raise SystemExit(main())
