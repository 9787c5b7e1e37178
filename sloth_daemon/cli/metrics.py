"""`sloth metrics`: the queue's metrics as OpenMetrics text (or
Prometheus's text format), from the daemon, or read from the queue
read-only when none runs: then without what only a daemon counts (its
clock jumps, its keepers). docs/metrics.md; its options: commands.py.

Not a daily command: nothing here is imported by `add`, `ls` and the
rest (tests/acceptance/test_fast_cli.py)."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import connect, paths, tell_offline
from sloth_daemon.cli.output import echo

FORMATS = ("openmetrics", "prometheus")  # backends/metrics.py's, named here so a bad one costs no import


def metrics(*, fmt: str) -> None:
    """`sloth metrics` (its help and options: commands.py)."""
    if fmt not in FORMATS:
        raise errors.BadRequest(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}",
                                hint="openmetrics (the default) or prometheus (node_exporter's textfile format).")
    try:
        with connect(start=False) as c:
            text = c.call("metrics", format=fmt)["text"]
    except errors.DaemonNotRunning:
        tell_offline()
        text = _read(fmt)
    echo(text, nl=False)


def _read(fmt: str) -> str:
    """The queue's metrics, read from it read-only (no daemon's own)."""
    from sloth_daemon.backends import metrics as m
    from sloth_daemon.backends import open_read_only
    from sloth_daemon.cli.offline import target
    import time

    try:
        q = open_read_only(target(paths()))
    except FileNotFoundError:  # no queue yet: nothing has run
        return m.expose([], fmt)
    try:
        return m.expose(m.queue_families(q, now=time.time()), fmt)
    finally:
        q.close()
