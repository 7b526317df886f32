"""``python -m engine``: run the engine server (see `engine.cli`)."""

import sys

from engine.cli import main

sys.exit(main())
