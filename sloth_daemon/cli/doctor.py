"""``sloth doctor``: check what goes wrong in practice and say how to fix it.

Each check returns ok / warn / fail with a one-line detail and, unless ok, a
hint. Only ``fail`` makes the command exit 1. Nothing here writes to the
database (it is opened read-only) or changes any setting.
"""

from __future__ import annotations

import os
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from sloth_daemon.errors import DaemonNotRunning, SlothError
from sloth_daemon.paths import advice, not_ours
from sloth_daemon.paths import Paths, resolve
from sloth_daemon.text import shell_command


def doctor(*, as_json: bool, platform: str | None) -> int:
    """`sloth doctor` (its help and options: commands.py): exit 1 if a check fails."""
    import json

    from sloth_daemon.cli.output import echo

    checks = run_checks(plat=platform)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        echo(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, indent=2, sort_keys=True))
    else:
        echo(format_checks(checks))
    return 1 if failed else 0

ENABLED_STATES = {"enabled", "enabled-runtime", "loaded"}


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    detail: str
    hint: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def warn(name: str, detail: str, hint: str) -> Check:
    return Check(name, "warn", detail, hint)


def fail(name: str, detail: str, hint: str) -> Check:
    return Check(name, "fail", detail, hint)


def run_checks(p: Paths | None = None, *, plat: str | None = None) -> list[Check]:
    from sloth_daemon import service

    p = p or resolve()
    plat = service.platform(plat)
    svc = _guard("service", lambda: service.status(plat=plat))
    manager = _guard("service", lambda: _manager_answers(plat))
    can_install = manager is not False  # None: cannot tell (macOS, no systemctl): the service check says
    st = _daemon_status(p)
    url = _shared_url(p)
    checks = [
        _check("service", lambda: check_service(svc, plat, can_install=can_install)),
        _check("service binary", lambda: check_binary(svc)),
        _check("daemon", lambda: check_daemon(p, st, can_install=can_install)),
        _check("runtime dir", lambda: check_runtime(p)),
        _check("data dir", lambda: check_data_dir(p.data_dir)),
        _check("files", lambda: check_files(p, running=isinstance(st, dict))),
        _check("queue", lambda: check_queue(p, url)),
        _check("database", lambda: check_database(p.db, url)),
    ]
    if plat == "linux":
        checks.append(_check("linger", check_linger))
    checks += [_check("clock check", lambda: check_clock(st)), _check("config", lambda: check_config(p)),
               _check("notify", lambda: check_notify(p, st))]
    checks += [_check("keep-awake", check_keep_awake), _check("limits", check_limits)]
    return checks


def check_keep_awake() -> Check:
    """What `--keep-awake` runs here (keeper/keep_awake.py), asked as a run would
    (logind over the system bus). Where nothing can hold it, a warning:
    `sloth add --keep-awake` is refused here."""
    from sloth_daemon.keeper import keep_awake

    tool, why = keep_awake.keep_awake_here()
    if tool is not None:
        return ok("keep-awake", f"{tool} (a lid close still suspends: logind's HandleLidSwitch)")
    if why and "not installed" in why:
        fix = "Install systemd's systemd-inhibit (it needs systemd-logind), or leave --keep-awake out here."
    elif why and "logind" in why:
        fix = ("No logind answers on the system bus here (a container, WSL, a minimal server): nothing can keep "
               "this machine awake; leave --keep-awake out here, or start dbus and systemd-logind.")
    else:
        fix = "Nothing can keep this machine awake; leave --keep-awake out here."
    return warn("keep-awake", f"unavailable: {why}; --keep-awake (and a lane's keep_awake) is refused at add", fix)


def check_limits() -> Check:
    """Which mechanism applies each of --mem, --cpus, --nice, --io here
    (informational: one that cannot be applied is refused at `sloth add`)."""
    from sloth_daemon.keeper import resource_limits

    found = resource_limits.probe()
    have = [f"{k}: {found[k]}" for k in ("mem", "cpus", "nice", "io") if found.get(k)]
    missing = [f"{k} ({found.get('why_' + k)})" for k in ("mem", "cpus", "nice", "io") if not found.get(k)]
    return ok("limits", "; ".join(have) + ("; not here (refused at add): " + "; ".join(missing) if missing else ""))


def _manager_answers(plat: str) -> bool | None:
    """systemd's user manager answers here (Linux); None where not asked."""
    if plat != "linux":
        return None
    from sloth_daemon.service.systemd import manager_answers

    return manager_answers()


_NO_MANAGER = ("no systemd user manager answers in this session (no user bus: su, sudo, ssh without a "
               "login session, a container), so `sloth service install` cannot work here")
_START = "sloth daemon start (`sloth add` starts it too)"


def format_checks(checks: list[Check]) -> str:
    lines = []
    for c in checks:
        line = f"{c.status:<5} {c.name:<15} {c.detail}"
        lines.append(line + (f"; fix: {c.hint}" if c.hint and c.status != "ok" else ""))
    counts = {s: sum(c.status == s for c in checks) for s in ("ok", "warn", "fail")}
    lines.append("doctor: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


def _check(name: str, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - one broken check must not hide the others
        return fail(name, f"the check itself failed: {e}", "Run `sloth --debug doctor` and report a bug.")


def _guard(name: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        return e


# ------------------------------------------------------------------- checks
def check_service(svc: Any, plat: str, *, can_install: bool = True) -> Check:
    if isinstance(svc, Exception):
        msg = svc.message if isinstance(svc, SlothError) else str(svc)
        return warn("service", f"cannot tell: {msg}", getattr(svc, "hint", "") or "See `sloth service status`.")
    if not svc["installed"]:
        if not can_install:
            return warn("service", f"not installed ({svc['path']}), and {_NO_MANAGER}",
                        f"{_START}; for a login service, log in directly (a desktop or `ssh` session with "
                        "systemd-logind), then `sloth service install --now`")
        return warn("service", f"not installed ({svc['path']}): the daemon does not start at login",
                    "sloth service install --now")
    if svc["enabled"] is None:
        return warn("service", f"installed at {svc['path']}, but {svc['manager']} cannot be asked",
                    "Is the service manager running? See `sloth service status`.")
    if svc["enabled"] not in ENABLED_STATES:
        return warn("service", f"installed but not enabled ({svc['enabled']})", "sloth service install --now")
    if svc["active"] == "failed":
        cmd = ("journalctl --user -u sloth.service -e; then systemctl --user reset-failed sloth.service "
               "&& systemctl --user start sloth.service") if plat == "linux" else "see the daemon log"
        return fail("service", "enabled but failed (start limit or crash loop)", cmd)
    detail = f"{svc['enabled']}, {svc['active']} ({svc['path']})"
    if svc.get("current") is False:
        return warn("service", detail + "; differs from what `sloth service install` writes now",
                    "sloth service install (then restart the service to apply)")
    return ok("service", detail)


def check_binary(svc: Any) -> Check:
    if isinstance(svc, Exception) or not svc["installed"]:
        return ok("service binary", "n/a (no service installed)")
    if not svc["binary"]:
        return fail("service binary", f"cannot find the program in {svc['path']}",
                    "Re-write it: sloth service install")
    if not svc["binary_exists"]:
        return fail("service binary", f"{svc['binary']} no longer exists (venv moved or removed?)",
                    "Re-run `sloth service install` with the sloth you use now.")
    return ok("service binary", svc["binary"])


def _daemon_status(p: Paths) -> Any:
    from sloth_daemon.cli.client import Client

    try:
        with Client(p.socket, timeout_s=5) as c:
            return c.call("status")
    except Exception as e:  # noqa: BLE001 - reported by check_daemon
        return e


def check_daemon(p: Paths, st: Any, *, can_install: bool = True) -> Check:
    start = "sloth daemon start (or sloth service install --now)" if can_install else _START
    if isinstance(st, DaemonNotRunning):
        stale = " (a stale socket file is left; the next start replaces it)" if p.socket.exists() else ""
        return warn("daemon", f"not running: {st.message}{stale}", start)
    if isinstance(st, SlothError):
        return fail("daemon", f"answered with an error: {st.message}", st.hint or start)
    if isinstance(st, Exception):
        return fail("daemon", f"did not answer on {p.socket}: {st}",
                    f"It may be hung: see {p.daemon_log}; restart it (sloth daemon stop; sloth daemon start).")
    detail = f"pid {st.get('pid')}, version {st.get('version')}, on {p.socket}"
    their_db = (st.get("paths") or {}).get("db")
    if their_db and their_db != str(p.db):
        return warn("daemon", f"{detail}, but it serves {their_db}, not {p.db}",
                    "The service's environment differs from this shell's (XDG_* variables?): "
                    "set SLOTH_HOME for both, then `sloth service install`.")
    return ok("daemon", detail)


def check_runtime(p: Paths) -> Check:
    d, sock, uid = p.runtime_dir, p.socket, os.getuid()
    ds = _lstat(d)
    if ds is None:
        return ok("runtime dir", f"{d} not created yet (the daemon makes it 0700)")
    if not stat.S_ISDIR(ds.st_mode):
        return fail("runtime dir", f"{d} is not a folder",
                    f"Remove it ({shell_command('rm', d)}); the daemon recreates it.")
    problems = _owner_mode(d, ds, uid, 0o700)
    ss = _lstat(sock)
    if ss is not None:
        if not stat.S_ISSOCK(ss.st_mode):
            problems.append(f"{sock} is not a socket")
        else:
            problems += _owner_mode(sock, ss, uid, 0o600)
    foreign = next((st.st_uid for st in (ds, ss) if st is not None and st.st_uid != uid), None)
    if foreign is not None:  # another user's: never chmod or remove it (paths.py)
        return fail("runtime dir", "; ".join(problems), advice(d, foreign))
    if problems:
        return fail("runtime dir", "; ".join(problems),
                    f"{shell_command('chmod', '700', d)}; {shell_command('chmod', '600', sock)} "
                    "(or remove them: the daemon recreates both)")
    return ok("runtime dir", f"{d} 0700" + (", socket 0600" if ss is not None else ", no socket"))


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _owner_mode(path: Path, st: os.stat_result, uid: int, want: int) -> list[str]:
    out = []
    if st.st_uid != uid:
        out.append(f"{path} {not_ours(path, st.st_uid)[0]}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        out.append(f"{path} has mode {stat.S_IMODE(st.st_mode):04o} (want {want:04o})")
    return out


def check_data_dir(d: Path) -> Check:
    hint = "Fix its permissions, or set SLOTH_HOME to a writable folder."
    if d.exists():
        if not d.is_dir():
            return fail("data dir", f"{d} is not a folder", f"Move it away; {hint}")
        try:
            fd, name = tempfile.mkstemp(dir=d, prefix=".doctor-")
            os.close(fd)
            os.unlink(name)
        except OSError as e:
            return fail("data dir", f"cannot write in {d}: {e.strerror or e}", hint)
        return ok("data dir", f"{d} writable")
    anc = d.parent
    while not os.path.lexists(anc) and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        return fail("data dir", f"cannot create {d}: {anc} is a file, not a folder", f"Move {anc} away; {hint}")
    if not os.access(anc, os.W_OK | os.X_OK):
        return fail("data dir", f"cannot create {d}: {anc} is not writable", hint)
    return ok("data dir", f"{d} does not exist yet; it is created at first start")


def check_files(p: Paths, *, running: bool = False) -> Check:
    """Owner, mode and links of every sloth folder and file (paths.py's
    rule). ``running``: a daemon answers (it tightens modes when it starts,
    not while it runs: the advice says which to do)."""
    from sloth_daemon.paths import problems

    found = [(path, *pr) for path, is_dir in _our_paths(p) if (pr := problems(path, is_dir=is_dir))]
    refused = [f"{path} {text}" for path, text, fatal in found if fatal] + _odd_job_logs(p.all_jobs_log_dir)
    loose = [f"{path} {text}" for path, text, fatal in found if not fatal]
    foreign = _first_foreign(path for path, _ in _our_paths(p))
    if foreign is not None:  # another user's: never "make them yours" (paths.py)
        return fail("files", _some(refused + loose), advice(*foreign))
    if refused:
        return fail("files", _some(refused + loose),
                    "Make them yours and private (chmod 700 folders, 600 files; remove links), or point "
                    "SLOTH_HOME at a folder of your own. The daemon refuses to start until then.")
    if loose:
        then = ("or restart the daemon (sloth daemon restart: running jobs carry on); it tightens its own "
                "folders and files when it starts" if running else
                "or start the daemon (sloth daemon start): it tightens its own folders and files when it starts")
        return warn("files", _some(loose), f"chmod 700 the folders and 600 the files, {then}")
    return ok("files", "every folder 0700 and file 0600, yours, no links")


def _first_foreign(paths: Iterable[Path]) -> tuple[Path, int] | None:
    """The first of ``paths`` that another user owns, and who."""
    for path in paths:
        st = _lstat(path)
        if st is not None and st.st_uid != os.getuid():
            return path, st.st_uid
    return None


def _some(items: list[str]) -> str:
    return "; ".join(items[:4]) + (f" (and {len(items) - 4} more)" if len(items) > 4 else "")


def _our_paths(p: Paths) -> list[tuple[Path, bool]]:
    out = [(d, True) for d in p.private_dirs()]
    try:
        out += [(p.all_jobs_log_dir / n, True) for n in sorted(os.listdir(p.all_jobs_log_dir))
                if (p.all_jobs_log_dir / n).is_dir() or (p.all_jobs_log_dir / n).is_symlink()]
    except OSError:
        pass
    return out + [(f, False) for f in p.private_files()]


def _odd_job_logs(root: Path, limit: int = 100_000) -> list[str]:
    """Links, non-files and files of other users among the job logs."""
    out: list[str] = []
    uid, seen = os.getuid(), 0
    for d in [root, *(Path(e.path) for e in _scan(root) if e.is_dir(follow_symlinks=False))]:
        for e in _scan(d):
            seen += 1
            if seen > limit:
                return out
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                continue
            if stat.S_ISLNK(st.st_mode):
                out.append(f"{e.path} is a link")
            elif not stat.S_ISREG(st.st_mode):
                out.append(f"{e.path} is not a regular file")
            elif st.st_uid != uid:
                out.append(f"{e.path} {not_ours(e.path, st.st_uid)[0]}")
    return out


def _scan(d: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(d) as it:
            return list(it)
    except OSError:
        return []


def _shared_url(p: Paths) -> str | SlothError | None:
    """The PostgreSQL queue's URL if the queue is one (config or environment),
    or why it cannot be used (psycopg missing)."""
    from sloth_daemon.config import load, queue_target
    from sloth_daemon.errors import ConfigError

    try:
        target = queue_target(load(p.config_file), p.db)
    except ConfigError:
        return None  # the config check says what is wrong
    except SlothError as e:
        return e
    return target if isinstance(target, str) else None


def check_queue(p: Paths, url: str | SlothError | None = None) -> Check:
    """A fresh folder, a sound queue, or a lost one (identity.py); for a
    shared queue (``url``), whether it is there and this sloth's (no local
    file to lose: its identity is in its database)."""
    from sloth_daemon.backends.sqlite.identity import findings

    if isinstance(url, SlothError):
        return fail("queue", url.message, url.hint)
    if url:
        return _check_shared_queue(url)
    status, detail, fix = findings(p)
    return Check("queue", status, detail, fix)


def _check_shared_queue(url: str) -> Check:
    from sloth_daemon.backends.postgres.errors import describe
    from sloth_daemon.backends import open_read_only

    where = describe(url)
    try:
        with open_read_only(url) as q:
            qid = q.identity
    except SlothError as e:
        return fail("queue", f"the shared queue at {where}: {e.message}", e.hint)
    return ok("queue", f"shared queue {qid or '(id not recorded yet)'} at {where}")


def check_database(db: Path, url: str | SlothError | None = None) -> Check:
    import sqlite3  # for its error types; the check itself is db.quick_check

    from sloth_daemon.backends.sqlite.db import quick_check
    from sloth_daemon.backends.sqlite.identity import file_problem

    if url:
        return ok("database", "n/a: the queue is on PostgreSQL (its schema is checked under queue)")
    if not db.exists():
        return ok("database", f"{db} does not exist yet")
    broken = f"{db}.broken"
    fix = (f"Stop the daemon (sloth daemon stop), then salvage what is readable: {shell_command('mv', db, broken)} && "
           f"{shell_command('sqlite3', broken, '.recover')} | {shell_command('sqlite3', db)} (or restore a backup).")
    problem = file_problem(db)
    if problem is not None:  # an empty file "passes" quick_check: it is no queue at all
        return fail("database", f"{db} {problem}", fix)
    try:
        rows = quick_check(db)
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            return warn("database", f"{db} is busy: {e}", "Try again in a moment.")
        return fail("database", f"{db}: {e}", fix)
    except sqlite3.DatabaseError as e:
        return fail("database", f"{db}: {e}", fix)
    if rows == ["ok"]:
        return ok("database", f"{db} passes quick_check")
    return fail("database", f"{db}: quick_check: {'; '.join(rows[:3])}", fix)


def check_linger() -> Check:
    from sloth_daemon.service import linger, user_name

    state, user = linger(), user_name()
    if state == "yes":
        return ok("linger", f"on for {user}: the service keeps running after logout")
    fix = shell_command("loginctl", "enable-linger", user)
    if state == "no":
        return warn("linger", "off: the service and its jobs stop when you log out", fix)
    return warn("linger", "unknown (no loginctl or logind answer)", f"If you use systemd: {fix}")


def check_clock(st: Any) -> Check:
    if isinstance(st, Exception):
        return warn("clock check", "unknown: the daemon is not reachable", "Start it: sloth daemon start")
    c = st.get("clock") or {}
    last, every = c.get("last_check_at"), c.get("check_interval_s")
    if "last_check_at" in c and last is None:
        return warn("clock check", "no check has run yet (did the daemon just start?)", "Run `sloth doctor` again.")
    if not (_is_number(last) and _is_number(every)):
        return warn("clock check", "unknown: the daemon does not report clock.last_check_at",
                    "Upgrade so client and daemon match, then restart the daemon.")
    last, every = float(last), float(every)  # type: ignore[arg-type]  # checked just above
    age = time.time() - last
    limit = max(3 * every, every + 10)
    if age > limit:
        return fail("clock check", f"last ran {age:.0f}s ago, expected every {every:g}s (sleep detection stalled)",
                    "Restart the daemon (sloth daemon stop; sloth daemon start) and report a bug with its log.")
    return ok("clock check", f"last ran {max(age, 0):.0f}s ago (every {every:g}s)")


def check_config(p: Paths) -> Check:
    from sloth_daemon.config import load

    try:
        load(p.config_file)
    except SlothError as e:
        return fail("config", e.message, e.hint)
    if not p.config_file.exists():
        return ok("config", f"no {p.config_file}; defaults apply")
    return ok("config", f"{p.config_file} parses")


def check_notify(p: Paths, st: Any = None) -> Check:
    """A notification setting whose tool is missing would fail silently; a
    tool that is there but fails in the daemon (no session bus) is what the
    daemon says (status ``notify.trouble``)."""
    import shutil
    import sys

    from sloth_daemon.config import load

    try:
        events = load(p.config_file).notify
    except SlothError:
        return ok("notify", "n/a (see config)")
    if not events:
        return ok("notify", "off (notify = [])")
    tool = "osascript" if sys.platform == "darwin" else "notify-send"
    trouble = ((st.get("notify") or {}) if isinstance(st, dict) else {}).get("trouble")
    off = f"turn them off: notify = [] in {p.config_file}"
    if isinstance(trouble, dict):
        cause = str(trouble.get("cause"))
        when = time.strftime("%H:%M", time.localtime(trouble["since"])) if _is_number(trouble.get("since")) else "?"
        detail = (f"{tool} fails in the daemon: {cause} ({trouble.get('failed')} notice(s) failed since {when}): "
                  "no desktop notification shows")
        if "bus" in cause.lower() or "display" in cause.lower():
            return warn("notify", detail, "The daemon has no session bus to reach your desktop (it was started "
                        "outside it: ssh, a service without DISPLAY): restart it from your desktop session "
                        "(`sloth daemon restart` in a terminal there; for the login service first "
                        "`systemctl --user import-environment DISPLAY DBUS_SESSION_BUS_ADDRESS`), or " + off)
        return warn("notify", detail, f"See {p.daemon_log}; fix what {tool} says, or {off}")
    if shutil.which(tool):
        return ok("notify", f"on {', '.join(events)} via {tool}"
                  + ("" if isinstance(st, dict) else " (the daemon is not running: not tried)"))
    fix = ("" if sys.platform == "darwin" else "install notify-send (Debian/Ubuntu: sudo apt install "
           "libnotify-bin; Fedora: sudo dnf install libnotify), or ") + f"turn them off: notify = [] in {p.config_file}"
    return warn("notify", f"notify = {list(events)}, but {tool} is not on PATH: no desktop notification shows",
                fix)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
