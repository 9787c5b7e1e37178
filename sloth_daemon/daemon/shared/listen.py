"""LISTEN/NOTIFY for a daemon on a shared queue: a hint, never the truth.

A connection of its own (a LISTENing session must stay open; the queue's
connection reconnects whenever it likes) hears ``sloth_jobs`` (jobs became
queued somewhere: look for work now, not at the next poll) and
``sloth_cancel`` (a running job was cancelled: if it runs here, end it now,
not at its next renewal). The server sends these from triggers (schema v4).

Nothing depends on a notification arriving: the daemon polls every
``poll_s`` too, and every connect (the first, and each after one was lost)
wakes the worker, since notifications sent meanwhile are gone. Reading is
done on the event loop (the socket is watched; no thread, no round trip),
connecting in a thread, with backoff. ``listen = false`` (PgBouncer in
transaction mode, where a session cannot LISTEN) leaves this out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Callable

import psycopg
from psycopg import pq

from sloth_daemon.backends.postgres import db as pgdb
from sloth_daemon.backends.postgres.errors import first_line

log = logging.getLogger("sloth.listen")
CHANNELS = ("sloth_jobs", "sloth_cancel")
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class Listener:
    def __init__(self, url: str, options: pgdb.PgOptions, *, on_jobs: Callable[[], None],
                 on_cancel: Callable[[int], None]) -> None:
        self.url, self.options = url, options
        self.on_jobs, self.on_cancel = on_jobs, on_cancel
        self.connected = False
        self._event = asyncio.Event()  # the socket is readable, or we are kicked
        self._kicked = False  # revalidate() or close(): leave the connection
        self._closing = False

    async def run(self) -> None:
        """Listen until closed, connecting again (with backoff) whenever the
        connection is lost."""
        tries = 0
        while not self._closing:
            try:
                conn = await asyncio.get_running_loop().run_in_executor(None, self._connect)
            except (psycopg.Error, OSError) as e:
                delay = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
                tries += 1
                log.warning("cannot LISTEN (trying again in %gs): %s", delay, first_line(e))
                await asyncio.sleep(delay)
                continue
            tries = 0
            self.on_jobs()  # what was notified while we were not listening is lost: look now
            try:
                await self._pump(conn)
            finally:
                self.connected = False
                with contextlib.suppress(Exception):
                    conn.close()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        kwargs = {**self.options.connect_kwargs(), "application_name": "sloth-listen"}
        conn = psycopg.connect(self.url, autocommit=True, **kwargs)
        for ch in CHANNELS:
            conn.execute(f"LISTEN {ch}")
        return conn

    async def _pump(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """Hand on notifications as they come, until the connection fails
        (keepalives and tcp_user_timeout make a dead one fail) or we are
        kicked (revalidate, close)."""
        loop = asyncio.get_running_loop()
        fd = conn.fileno()
        self._kicked = False
        loop.add_reader(fd, self._event.set)
        self.connected = True
        try:
            while not self._kicked:
                await self._event.wait()
                self._event.clear()
                if not self._kicked:
                    self._drain(conn.pgconn)
        except psycopg.Error as e:
            log.warning("lost the LISTEN connection: %s", first_line(e))
        finally:
            loop.remove_reader(fd)

    def _drain(self, pgconn: pq.abc.PGconn) -> None:
        pgconn.consume_input()  # raises OperationalError on a dead connection
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("the server closed the connection")
        jobs = False
        while (n := pgconn.notifies()) is not None:
            if n.relname == b"sloth_cancel":
                self._cancelled(n.extra)
            else:
                jobs = True
        if jobs:
            self.on_jobs()

    def _cancelled(self, payload: bytes) -> None:
        try:
            job_id = int(payload)
        except ValueError:
            return  # not ours to read: any session may NOTIFY
        self.on_cancel(job_id)

    def revalidate(self) -> None:
        """The connection may be dead unseen (a resume): make a new one."""
        self._kicked = True
        self._event.set()

    def close(self) -> None:
        self._closing = True
        self.revalidate()
