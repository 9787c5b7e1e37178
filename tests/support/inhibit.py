"""A fake ``systemd-inhibit`` first on the daemon's PATH (acceptance tests):
it records each holder's pid and argv, and behaves as the real one does."""

from __future__ import annotations

from pathlib import Path

from tests.support.harness import Harness

# As the real one: `--list` asks logind (here: it answers); else, the lock
# taken, it runs its command as a child and waits for it. FAKE_REFUSE: logind
# answers, but refuses the lock (a policy): exit 1, as the real one does.
FAKE_INHIBIT = """#!/bin/sh
[ "$1" = "--list" ] && exit 0
echo "$$ $*" >> "$INHIBIT_LOG"
if [ -n "$FAKE_REFUSE" ]; then echo "Failed to inhibit: Access denied" >&2; exit 1; fi
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done
"$@"
"""


def with_fake_inhibit(h: Harness, **env: str) -> Path:
    """The daemon (and so its keeper) finds the fake systemd-inhibit first; its record."""
    bin_dir = h.home / "fakebin"
    bin_dir.mkdir()
    tool = bin_dir / "systemd-inhibit"
    tool.write_text(FAKE_INHIBIT)
    tool.chmod(0o755)
    record = h.home / "inhibit.log"
    h.daemon_env.update(PATH=f"{bin_dir}:{h.daemon_env.get('PATH', '')}", INHIBIT_LOG=str(record), **env)
    return record
