"""``python -m sloth_daemon.daemon``: the daemon alone, without the CLI's
modules (what a daemon renewed at rest execs: renewal.py)."""

from sloth_daemon.daemon.main import main

raise SystemExit(main())
