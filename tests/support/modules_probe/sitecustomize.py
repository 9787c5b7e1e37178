"""Put on a daemon's PYTHONPATH with $SLOTH_TEST_MODULES_OUT set: on SIGUSR2
the daemon (`sloth daemon run`, or `python -m sloth_daemon.daemon run` as a
renewal execs it) writes there, as JSON, the names of the modules it has
loaded and its -O level (tests/acceptance/test_renewal.py). Other processes
(the keeper, jobs) are left alone."""

import json
import os
import signal
import sys

_OUT = os.environ.get("SLOTH_TEST_MODULES_OUT")
_ARGV = getattr(sys, "orig_argv", [])
if _OUT and "run" in _ARGV and ("daemon" in _ARGV or "sloth_daemon.daemon" in _ARGV):
    def _dump(*_: object) -> None:
        tmp = _OUT + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"modules": sorted(k for k, v in sys.modules.items() if v is not None),
                       "optimize": sys.flags.optimize}, f)
        os.replace(tmp, _OUT)

    signal.signal(signal.SIGUSR2, _dump)
