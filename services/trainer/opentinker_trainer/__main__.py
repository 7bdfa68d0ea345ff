"""`python -m opentinker_trainer`."""

from opentinker_trainer.main import main

if __name__ == "__main__":
    raise SystemExit(main())
