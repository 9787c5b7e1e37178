"""The machines that serve a PostgreSQL queue: one row per daemon's host,
refreshed every few seconds on the server's clock (`sloth status`, `sloth
db status`), and the rule that keeps two machines from serving under one
name: a host's jobs are its daemon's to adopt or give back, so a second
live daemon under that name would give back jobs the first still runs.

PgMachines holds these on one connection: the ``machines`` part of the
PostgreSQL engine and of its read-only engine (engine.py).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from sloth_daemon.errors import ConfigError
from sloth_daemon.backends import contract
from sloth_daemon.backends.contract import Host
from sloth_daemon.backends.postgres.db import Connection, Cursor, one

# What a refresh writes; the server's now comes back (for a daemon's
# estimate of the server's clock, and to judge the row it may replace).
SQL_SEEN = """
INSERT INTO sloth.hosts AS h (name, tags, worker, pid, boot_id, version, started_at, resources, last_seen)
VALUES (%(name)s, %(tags)s, %(worker)s, %(pid)s, %(boot_id)s, %(version)s, %(started_at)s, %(resources)s, sloth.now())
ON CONFLICT (name) DO UPDATE SET tags = excluded.tags, worker = excluded.worker, pid = excluded.pid,
    boot_id = excluded.boot_id, version = excluded.version, started_at = excluded.started_at,
    resources = excluded.resources, last_seen = sloth.now()
RETURNING sloth.now() AS now
"""
SQL_CLAIM_NAME = "SELECT *, sloth.now() AS now FROM sloth.hosts WHERE name = %s FOR UPDATE"
SQL_HOSTS = "SELECT *, sloth.now() - last_seen AS ago FROM sloth.hosts ORDER BY name"
SQL_FORGET = "DELETE FROM sloth.hosts WHERE name = %s AND worker = %s RETURNING name"


class PgMachines(contract.Machines):
    """The hosts table over ``db``. No state of its own."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def register_host(self, me: Host, *, alive_s: float, pid_alive: Callable[[int], bool]) -> float:
        return self._db.write(lambda c: _register(c, me, alive_s, pid_alive), "registering this host")

    def host_seen(self, me: Host) -> float:
        return float(self._db.write_one(SQL_SEEN, me.row(), "refreshing this host")[0]["now"])

    def forget_host(self, me: Host) -> None:
        self._db.write_one(SQL_FORGET, (me.name, me.worker), "forgetting this host")

    def hosts(self) -> list[dict[str, Any]]:
        rows = self._db.read(lambda c: c.execute(SQL_HOSTS).fetchall(), "listing hosts")
        return [{**r, "tags": list(r["tags"]), "resources": _resources(r.get("resources"))} for r in rows]


def _resources(text: str | None) -> dict[str, int] | None:
    """A host row's published resources; what does not read as such is not
    said. Another machine wrote it: JSON nested past the recursion limit,
    a count that is not a whole number of tokens, are not resources."""
    try:
        got = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(got, dict) or not all(type(v) is int and v >= 0 for v in got.values()):
        return None
    return {str(k): v for k, v in got.items()}


def _register(c: Cursor, me: Host, alive_s: float, pid_alive: Callable[[int], bool]) -> float:
    row = c.execute(SQL_CLAIM_NAME, (me.name,)).fetchone()
    if row is not None and row["worker"] != me.worker:
        why = _in_use(row, me, alive_s, pid_alive)
        if why:
            raise ConfigError(f"host name {me.name!r} is in use: {why}",
                              hint="Give each machine its own name: host = \"NAME\" in config.toml"
                                   " (by default the machine's hostname).")
    return float(one(c.execute(SQL_SEEN, me.row()))["now"])


def _in_use(row: Any, me: Host, alive_s: float, pid_alive: Callable[[int], bool]) -> str | None:
    """Why another daemon holds the name, or None if it is gone."""
    ago = row["now"] - row["last_seen"]
    if row["boot_id"] != me.boot_id:
        if ago < alive_s:
            return f"another machine's daemon ({row['worker']}) refreshed it {ago:.0f}s ago"
        return None
    if int(row["pid"]) != me.pid and pid_alive(int(row["pid"])):
        return f"daemon pid {row['pid']} on this machine runs under it"
    return None
