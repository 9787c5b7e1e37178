"""A throwaway PostgreSQL cluster for tests and benchmarks: the real server,
in a temporary folder, removed afterwards.

PostgreSQL refuses to run as root and CI runs as root, so as root the server
runs as an unprivileged user (``postgres`` if it exists, else ``nobody``,
else a system user made for it) through ``setpriv``; as anyone else it runs
as that user. The folder (0700, owned by the server's user) holds the data
directory, the log and the Unix socket. The server also listens on a free
loopback port so that TCP-only connection settings (keepalives,
tcp_user_timeout) can be exercised. ``fsync`` stays on: on tmpfs it costs
nothing, on a disk it is what a benchmark must measure.

A watchdog process stops the server and removes the folder if the process
that started it dies without cleaning up (kill -9 of pytest, a CI timeout).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "sloth_test"  # the role initdb makes; trust auth, so no password
SKIP_ENV = "SLOTH_SKIP_PG"  # set to 1 to skip the PostgreSQL tests locally
BIN_ENV = "SLOTH_PG_BIN"  # a folder with initdb, pg_ctl and postgres


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries (or no psycopg) on this machine."""


def find_bindir() -> Path | None:
    """The folder with initdb/pg_ctl: $SLOTH_PG_BIN, else the newest of Debian's
    /usr/lib/postgresql/*/bin, else the one on PATH."""
    env = os.environ.get(BIN_ENV)
    if env:
        return Path(env) if (Path(env) / "initdb").exists() else None
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if found:
        newest = max(found, key=lambda p: _version_key(Path(p).parent.parent.name))
        return Path(newest).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _version_key(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in name.split("."))


def server_account() -> tuple[int, int]:
    """(uid, gid) to run the server as: ourselves unless we are root."""
    if os.geteuid() != 0:
        return os.geteuid(), os.getegid()
    for name in ("postgres", "nobody"):
        try:
            pw = pwd.getpwnam(name)
            return pw.pw_uid, pw.pw_gid
        except KeyError:
            continue
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                    "sloth-pgtest"], check=True, capture_output=True)
    pw = pwd.getpwnam("sloth-pgtest")
    return pw.pw_uid, pw.pw_gid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fast_tmp() -> str | None:
    """tmpfs when there is one: the tests are about logic, and there a commit's
    fsync is free. Benchmarks pass a folder on the real disk instead."""
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


class PgCluster:
    """One running server. ``url(db)`` connects over the Unix socket,
    ``tcp_url(db)`` over loopback TCP."""

    def __init__(self, parent: str | None = None, *, bindir: Path | None = None,
                 listen: tuple[str, ...] = (), trust: tuple[str, ...] = ()) -> None:
        """``listen``: addresses to listen on besides loopback (e.g. a veth
        pair's, for daemons in network namespaces); ``trust``: networks
        (CIDR) whose connections need no password."""
        self.bindir = bindir or find_bindir()
        if self.bindir is None:
            raise PgUnavailable(
                "no PostgreSQL server binaries found (looked for /usr/lib/postgresql/*/bin/initdb,"
                f" initdb on PATH and ${BIN_ENV}); install Debian's `postgresql` package"
                f" (.ci/run does), or set {SKIP_ENV}=1 to skip these tests")
        self.uid, self.gid = server_account()
        self.base = Path(tempfile.mkdtemp(prefix="sloth-pg-", dir=parent))
        self.data = self.base / "data"
        self.log = self.base / "server.log"
        self.port = free_port()
        self.listen, self.trust = listen, trust
        self._watchdog: subprocess.Popen | None = None
        try:
            os.chown(self.base, self.uid, self.gid)
            self._initdb()
            self._start_watchdog()
            self.start()
        except BaseException:
            self.destroy()
            raise

    # ------------------------------------------------------------ lifecycle
    def _as_server(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]

    def _run(self, argv: list[str], timeout: float = 120) -> None:
        p = subprocess.run(self._as_server(argv), capture_output=True, text=True, timeout=timeout,
                           cwd=self.base)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
                               f"\n{self.server_log()}")

    def _initdb(self) -> None:
        # --no-sync only skips flushing initdb's own files; the server runs with fsync on.
        self._run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
                   "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"])
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(
                "\n# tests/support/pg.py\n"
                f"port = {self.port}\n"
                f"listen_addresses = '{','.join(('127.0.0.1', *self.listen))}'\n"
                f"unix_socket_directories = '{self.base}'\n"
                "fsync = on\n"
                "synchronous_commit = on\n"
                "max_connections = 200\n"
                "shared_buffers = 64MB\n"
                "log_min_messages = warning\n"
                "log_min_error_statement = panic\n"  # our tests provoke errors on purpose
            )
        with open(self.data / "pg_hba.conf", "a") as f:
            f.writelines(f"host all all {net} trust\n" for net in self.trust)

    def start(self) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                   "-w", "-t", "60", "start"])

    def stop(self, mode: str = "fast") -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60",
                   "stop"])

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        """Stop the server (if it runs) and remove the folder. Never raises."""
        try:
            if self.running():
                self.stop("immediate")
        except Exception:
            pass
        if self._watchdog is not None and self._watchdog.poll() is None:
            self._watchdog.kill()
            self._watchdog.wait()
        shutil.rmtree(self.base, ignore_errors=True)

    def _start_watchdog(self) -> None:
        """A detached shell that waits for us to exit, then stops the server and
        removes the folder: cleanup even when this process is killed."""
        script = (
            'p=$1 data=$2 base=$3; shift 3; '
            'while kill -0 "$p" 2>/dev/null; do sleep 1; done; '
            'if [ -f "$data/postmaster.pid" ]; then "$@" -D "$data" -m immediate stop >/dev/null 2>&1; fi; '
            'rm -rf "$base"'
        )
        argv = ["sh", "-c", script, "sloth-pg-watchdog", str(os.getpid()), str(self.data),
                str(self.base), *self._as_server([str(self.bindir / "pg_ctl")])]
        self._watchdog = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)

    def server_log(self, tail: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    # ------------------------------------------------------------ databases
    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.base}&port={self.port}"

    def tcp_url(self, dbname: str = "postgres", host: str = "127.0.0.1") -> str:
        return f"postgresql://{SUPERUSER}@{host}:{self.port}/{dbname}"

    def admin(self):
        """An autocommit psycopg connection to the maintenance database."""
        import psycopg

        return psycopg.connect(self.url("postgres"), autocommit=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE (from ``template`` if given); returns its URL."""
        from psycopg import sql

        q = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            q = sql.SQL("{} TEMPLATE {}").format(q, sql.Identifier(template))
        with self.admin() as c:
            c.execute(q)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        from psycopg import sql

        with self.admin() as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))




# ------------------------------------------------------------- for pytest
TEMPLATE_DB = "sloth_template"

# Empties a migrated queue database in a few milliseconds (CREATE DATABASE
# from the template takes ~80): every other session is ended first (a queue
# a failed test left open would block TRUNCATE), and triggers a test added
# are dropped (sloth's own, named sloth_tell_*, stay).
RESET_SQL = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
 WHERE datname = current_database() AND pid <> pg_backend_pid();
DO $$ DECLARE t record; BEGIN
  FOR t IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'sloth.jobs'::regclass AND NOT tgisinternal
                 AND tgname NOT LIKE 'sloth\\_tell\\_%'
  LOOP EXECUTE format('DROP TRIGGER %I ON sloth.jobs', t.tgname); END LOOP;
END $$;
TRUNCATE sloth.events, sloth.deps, sloth.logs, sloth.jobs, sloth.envs, sloth.meta, sloth.lanes, sloth.batches,
  sloth.hosts, sloth.schedules, sloth.schedule_runs, sloth.machine_events, sloth.attempts, sloth.outbox,
  sloth.results
  RESTART IDENTITY;
ALTER SEQUENCE sloth.fence RESTART;
"""


class PgDatabases:
    """Databases on one cluster for tests: a migrated template, fresh copies
    of it, and one shared database that ``reset()`` empties between tests."""

    def __init__(self, cluster: PgCluster) -> None:
        from sloth_daemon.queue import Queue

        self.cluster = cluster
        self._n = 0
        cluster.create_database(TEMPLATE_DB)
        Queue(cluster.url(TEMPLATE_DB)).close()  # migrate once; copies start migrated
        import psycopg

        with psycopg.connect(cluster.url(TEMPLATE_DB), autocommit=True) as c:
            # ... but not as copies of one queue: each makes its own identity when first opened
            c.execute("DELETE FROM sloth.meta WHERE key IN ('queue_id', 'queue_created_at')")
        self.shared_url = self.fresh("sloth_shared")

    def fresh(self, prefix: str = "t", *, migrated: bool = True) -> str:
        """A new database (a copy of the migrated template, or empty); its URL."""
        self._n += 1
        name = f"{prefix}_{os.getpid()}_{self._n}"
        return self.cluster.create_database(name, TEMPLATE_DB if migrated else None)

    def reset(self, url: str | None = None) -> str:
        """Empty the shared database (or ``url``'s) and return its URL."""
        import psycopg

        url = url or self.shared_url
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(RESET_SQL)
        return url

    def drop(self, url: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        self.cluster.drop_database(conninfo_to_dict(url)["dbname"])
