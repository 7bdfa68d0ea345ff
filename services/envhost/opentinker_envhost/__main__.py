"""`python -m opentinker_envhost`."""

from opentinker_envhost.main import main

if __name__ == "__main__":
    raise SystemExit(main())
