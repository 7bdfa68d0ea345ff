"""`python -m opentinker.dashboard --scheduler HOST:PORT [--host H] [--port N]` (see run.py)."""

import sys

from opentinker.dashboard.run import main

sys.exit(main())
