import sys

from opentinker_gateway.main import main

sys.exit(main())
