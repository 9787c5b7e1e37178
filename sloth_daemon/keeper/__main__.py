"""``python -m sloth_daemon.keeper``: the keeper process."""

import sys

from sloth_daemon.keeper.main import main

sys.exit(main())
