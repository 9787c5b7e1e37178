"""`sloth top`: the live full-screen view (issue 31; docs/top.md).

This package is the only one that imports Textual, and only inside
``top``: a daily command never loads it (tests/acceptance/test_fast_cli.py
checks). Parts: feed.py (the daemon's change stream, or the queue file
read-only), view.py (the rows and text shown), signatures.py (failures
grouped), keys.py (what each key does), app.py (the Textual app).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional


def top(filter_text: Optional[str] = None) -> int:
    """Run the view until `q`. It needs a terminal: piped, it says so and
    exits 2 (`sloth status` and `ls --json` are for scripts)."""
    import sys

    from sloth_daemon import errors

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise errors.BadRequest("`sloth top` draws on a terminal; stdin and stdout are not one",
                                hint="For a script use `sloth status --json` or `sloth ls --json`.")
    import os

    # The terminal's own size, read again at each resize: Textual asks shutil.get_terminal_size, which
    # takes $COLUMNS/$LINES first when they are exported, and would then never see a resize.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
    from sloth_daemon.cli.top.app import run

    return run(filter_text or "")
