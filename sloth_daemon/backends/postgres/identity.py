"""Which queue a PostgreSQL database holds, so that a queue whose database
was dropped, emptied or replaced under it is noticed, never silently used
(the counterpart of SQLite's identity in meta and db.Guard).

A queue gets a random id when it is made (or the first time a queue of an
older sloth is opened), kept in its meta table as on SQLite. An open queue
checks every new connection against it (pgdb.Connection.verify): after a
reconnect the same URL may reach another database (a failover to the wrong
server, a database renamed or restored into its place, DNS). Once that
happens the queue is broken for good and takes no more requests.
"""

from __future__ import annotations

import os
import json

import psycopg
from psycopg import errors as pgerr

from sloth_daemon.backends.postgres.errors import first_line
from sloth_daemon.backends.postgres.db import Cursor, PgConnection, one

SQL_ID_ADD = ("INSERT INTO sloth.meta (key, value) VALUES ('queue_id', %s), ('queue_created_at', sloth.now()::text)"
              " ON CONFLICT (key) DO NOTHING")
SQL_ID = "SELECT value FROM sloth.meta WHERE key = 'queue_id'"


def make(c: Cursor) -> str:
    """This queue's id, made now if it has none. Two daemons opening a new
    queue at once agree: the second's insert yields to the first's."""
    c.execute(SQL_ID_ADD, (json.dumps(os.urandom(8).hex()),))
    return str(json.loads(one(c.execute(SQL_ID))["value"]))


def other_queue(conn: PgConnection, identity: str) -> str | None:
    """Why the database behind ``conn`` is not the queue ``identity``, or None."""
    try:
        row = conn.execute(SQL_ID).fetchone()
    except (pgerr.UndefinedTable, pgerr.InvalidSchemaName) as e:
        return f"lost its schema ({first_line(e)})"
    except psycopg.Error:
        return None  # cannot tell (the connection failed): the next statement says why
    if row is None:
        return "holds no queue id any more: it was emptied, or the URL now reaches another database"
    found = json.loads(row["value"])
    return None if found == identity else f"is another queue now ({found}, not {identity})"
