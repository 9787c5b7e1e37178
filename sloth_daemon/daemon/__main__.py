"""``python -m sloth_daemon.daemon run``: the daemon alone, without the
CLI's modules (what a daemon renewed at rest execs: renewal.py). Users run
`sloth daemon run`."""

import sys

if sys.argv[1:] != ["run"]:
    sys.stderr.write("usage: python -m sloth_daemon.daemon run  (what `sloth daemon run` runs)\n")
    raise SystemExit(2)

from sloth_daemon.daemon.main import main  # noqa: E402

raise SystemExit(main())
