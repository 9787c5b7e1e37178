"""The queue edits on the command line (issue 22): `sloth edit`, `sloth
bump`, `sloth hold`, `sloth release`. Each is one request, one transaction
in the daemon (daemon/edit_ops.py); options are declared in commands.py.
On the fast path: no Typer, prints with output.echo, returns the exit code.

`sloth edit ID` with no change given opens the job's command in
``$VISUAL`` / ``$EDITOR`` (else vi) on a temporary file, as `git commit`
does: lines starting with ``#`` are dropped; an editor that fails, or a
file left empty or unchanged, changes nothing and says so. What comes back
is read as a line of `add --stdin` (cli/shell_lines.py): plain words run
directly, anything else through /bin/sh -c. The edit carries the job as it
was read (``expect``), so a job claimed (or changed) while the editor was
open is not edited.
"""

from __future__ import annotations

import os

from sloth_daemon import errors
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import command_after_dashes, parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

WAITING = ("queued", "blocked", "held")
COMMENT = """
# Edit the command of job {id} ({state}, lane {lane}), then save and quit.
# One shell line, as for `sloth add --stdin`. Lines starting with '#' are
# dropped; an empty file, or one left as it was, changes nothing.
"""
EXPECTED = ("state", "attempts", "updated_at", "command", "shell")


def _call(op: str, **args: Any) -> Any:
    """The request, starting the daemon (as `sloth add` does) if none runs."""
    from sloth_daemon.cli.add import connect_or_start

    with connect_or_start(False) as c:
        return c.call(op, **args)


# ----------------------------------------------------------------- edit
def edit(words: Sequence[str], *, command: Optional[str] = None, delay: Optional[str] = None,
         at: Optional[str] = None, after: Optional[Sequence[str]] = None,
         after_any: Optional[Sequence[str]] = None, shell: Optional[bool] = None, cwd: Any = None,
         as_json: bool = False, lane: Optional[str] = None, priority: Optional[int] = None,
         max_attempts: Optional[int] = None, lease: Optional[str] = None, timeout: Optional[str] = None,
         label: Optional[str] = None, retry_exit: Optional[str] = None, no_retry_exit: Optional[str] = None,
         anywhere: Optional[bool] = None, on: Optional[str] = None, keep_awake: Optional[bool] = None,
         mem: Optional[str] = None, cpus: Optional[str] = None, nice: Optional[int] = None, io: Optional[str] = None,
         when: Optional[Sequence[str]] = None, on_lost: Optional[str] = None, needs: Optional[Sequence[str]] = None,
         slots: Optional[int] = None, stall: Optional[str] = None, fail_on: Optional[str] = None,
         retry_on: Optional[Sequence[str]] = None, no_retry_on: Optional[Sequence[str]] = None,
         backoff: Optional[str] = None) -> int:
    """`sloth edit ID [options] [-- CMD ARGS...]` (help and options: commands.py;
    from ``lane`` on, the options of `sloth add` every job takes, add_options.job_fields)."""
    from sloth_daemon.cli import add_options as opts

    settings: dict[str, Any] = dict(
        lane=lane, priority=priority, max_attempts=max_attempts, lease=lease, timeout=timeout, label=label,
        retry_exit=retry_exit, no_retry_exit=no_retry_exit, anywhere=anywhere, on=on, keep_awake=keep_awake, mem=mem,
        cpus=cpus, nice=nice, io=io, when=when, on_lost=on_lost, needs=needs, slots=slots)

    if not words:
        raise errors.BadRequest("which job? `sloth edit ID`", hint="e.g. `sloth edit 12 --priority 5`.")
    jid = parse_id(words[0])
    argv = command_after_dashes(list(words), f"sloth edit {jid}")
    if command is not None and argv:
        raise errors.BadRequest("give the new command as --command TEXT or after --, not both")
    if delay is not None and at is not None:
        raise errors.BadRequest("--delay and --at cannot be used together")
    if shell and command is None and not argv:
        raise errors.BadRequest("--shell says how a new command runs: give it after --",
                                hint=f"e.g. `sloth edit {jid} --shell -- 'make 2>&1 | tee log'`.")
    changes: dict[str, Any] = {}
    if shell:
        changes.update(_line(command if command is not None else " ".join(argv), "--shell", shell=True))
    elif argv:
        _check_words(jid, argv)
        changes.update(command=argv, shell=False)
    elif command is not None:
        changes.update(_line(command, "--command"))
    removed = {k: None for k in ("when", "needs") if _none(settings.get(k))}
    changes.update(opts.job_fields(**{k: None if k in removed else v for k, v in settings.items()}), **removed)
    changes.update(opts.rules_fields(stall, fail_on, retry_on, no_retry_on, backoff))  # checked by the daemon
    if cwd is not None:
        from sloth_daemon.cli.add import caller_cwd

        changes["cwd"] = caller_cwd(cwd)
    if delay is not None or at is not None:
        changes["not_before"] = opts.not_before(delay, at)
    if after is not None or after_any is not None:
        changes["after"] = _ids(after, "--after")
        changes["after_any"] = _ids(after_any, "--after-any")
    expect = None
    if not changes:  # nothing given: the command, in an editor
        seen = _waiting_job(jid)
        edited = _from_editor(seen)
        if edited is None:
            return _unchanged(seen, as_json)
        changes, expect = edited, {k: seen[k] for k in EXPECTED}
    try:
        res = _call("edit", id=jid, changes=changes, **({"expect": expect} if expect else {}))
    except errors.FieldError as e:  # the daemon's check of the job with the edit over it: named as the option
        from sloth_daemon.cli.submit import as_option

        raise as_option(e, f"job {jid} was not changed") from None
    if as_json:
        emit_json(res)
    elif res["changed"]:
        from sloth_daemon.text import showable

        echo(f"job {jid} edited: {', '.join(map(showable, res['changes']))}")  # a label's \n or ESC, escaped
    else:
        echo(f"sloth: job {jid} unchanged: it already is as asked", err=True)
    return 0


def _ids(values: Optional[Sequence[str]], option: str) -> list[int]:
    """``--after 3,4`` -> [3, 4]; ``--after none`` -> [] (no prerequisites)."""
    from sloth_daemon.cli.add_options import id_list

    if values is not None and [v.strip().lower() for v in values] == ["none"]:
        return []
    return id_list(values, option)


def _none(values: Optional[Sequence[str]]) -> bool:
    """``--when none`` / ``--needs none``: remove them."""
    return values is not None and [v.strip().lower() for v in values] == ["none"]


def _line(text: str, where: str, *, shell: bool = False) -> dict[str, Any]:
    """A command as one shell line (as a line of `add --stdin`; ``shell``:
    through /bin/sh -c whatever it holds, as `add --shell`)."""
    from sloth_daemon.cli.shell_lines import line_job

    text = text.strip()
    if not text:
        raise errors.BadRequest(f"{where}: the command is empty")
    job = {"command": ["/bin/sh", "-c", text], "shell": True} if shell else {"shell": False, **line_job(text)}
    if job["shell"]:  # checked with sh -n as a line of `add --stdin` is: a broken one would only fail when run
        from sloth_daemon.cli.add import check_shell

        check_shell([job], lambda i: where, "nothing was edited")
    return job


def _check_words(jid: int, argv: list[str]) -> None:
    """Refused as `sloth add -- CMD ARGS` refuses them (add.check_shell):
    a program word that is a shell line, a `sh -c` script its shell cannot
    read. A relative path is looked for in the job's own folder."""
    from sloth_daemon.cli.add import check_shell

    relative = "/" in argv[0] and not argv[0].startswith("/")
    cwd = _call("show", id=jid)["job"]["cwd"] if relative else None
    check_shell([{"command": argv}], lambda i: "", "nothing was edited", cwd=cwd)


def _waiting_job(jid: int) -> dict[str, Any]:
    """The job as it is now; refused before an editor opens if it has started."""
    job = _call("show", id=jid)["job"]
    if job["state"] not in WAITING:
        raise errors.IllegalTransition(
            f"job {jid} is {job['state']}; only queued, blocked or held jobs can be edited",
            hint=f"`sloth restart {jid}` queues it again as a new job, which you can change.")
    return dict(job)


def shown_command(job: dict[str, Any]) -> str:
    """The command as a person edits it: the shell line, or the words quoted."""
    from sloth_daemon.text import shell_command

    cmd = job["command"]
    if job.get("shell") and len(cmd) == 3 and cmd[:2] == ["/bin/sh", "-c"]:
        return str(cmd[2])
    return shell_command(*cmd)


def _from_editor(job: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The changes the editor's file asks for; None if left as it was.
    Raises SlothError if the editor failed or the file was left empty."""
    import tempfile

    before = shown_command(job)
    fd, path = tempfile.mkstemp(prefix=f"sloth-edit-{job['id']}-", suffix=".sh")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(before + "\n" + COMMENT.format(id=job["id"], state=job["state"], lane=job["lane"]))
        _run_editor(path)
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = "\n".join(ln for ln in f.read().splitlines() if not ln.lstrip().startswith("#")).strip()
    finally:
        os.unlink(path)
    if not text:
        raise errors.SlothError(f"the file was left empty: job {job['id']} was not edited",
                                hint="To drop the job instead: `sloth cancel ID`.")
    if text == before:
        return None
    return _line(text, "the edited command")


def _run_editor(path: str) -> None:
    import subprocess

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        rc = subprocess.call(["/bin/sh", "-c", f'{editor} "$@"', editor, path])
    except OSError as e:
        raise errors.SlothError(f"cannot run the editor {editor!r}: {e.strerror or e}; nothing was edited",
                                hint="Set $EDITOR, or give the change as --command TEXT.") from None
    if rc != 0:
        raise errors.SlothError(f"the editor ({editor}) exited with status {rc}; nothing was edited",
                                hint="Give the change as --command TEXT, or fix $EDITOR.")


def _unchanged(job: dict[str, Any], as_json: bool) -> int:
    if as_json:
        emit_json({"job": job, "changes": [], "changed": False})
    echo(f"sloth: the command was left as it was: job {job['id']} was not edited", err=True)
    return 0


# ------------------------------------------------ bump, hold, release
def bump(ids: Sequence[str], as_json: bool = False) -> int:
    """`sloth bump ID...` (help: commands.py)."""
    res = _call("bump", ids=[parse_id(i) for i in ids])
    return _report(res, as_json, lambda j: f"job {j['id']} bumped to the front of lane {j['lane']} "
                                           f"(priority {j['priority']})")


def hold(ids: Optional[Sequence[str]] = None, *, lane: Optional[str] = None, as_json: bool = False) -> int:
    """`sloth hold ID...` / `sloth hold --lane L` (help: commands.py)."""
    res = _call("hold", **_selection(ids, lane, "hold"))
    return _report(res, as_json, lambda j: f"job {j['id']} held", lane=lane, none="nothing to hold")


def release(ids: Optional[Sequence[str]] = None, *, lane: Optional[str] = None, as_json: bool = False) -> int:
    """`sloth release ID...` / `sloth release --lane L` (help: commands.py)."""
    res = _call("release", **_selection(ids, lane, "release"))

    def line(j: dict[str, Any]) -> str:
        return f"job {j['id']} released: " + ("queued" if j["state"] == "queued" else
                                             "blocked until what it runs after ends" if j["state"] == "blocked"
                                             else j["state"])
    return _report(res, as_json, line, lane=lane, none="nothing held")


def _selection(ids: Optional[Sequence[str]], lane: Optional[str], verb: str) -> dict[str, Any]:
    if ids and lane is not None:
        raise errors.BadRequest(f"give job ids or --lane to {verb}, not both")
    if ids:
        return {"ids": [parse_id(i) for i in ids]}
    if lane is None:
        raise errors.BadRequest(f"which jobs? Give ids, or --lane, to {verb}",
                                hint=f"e.g. `sloth {verb} 12 13` or `sloth {verb} --lane video`.")
    return {"lane": lane}


def _report(res: dict[str, Any], as_json: bool, line: Any, *, lane: Optional[str] = None,
            none: str = "") -> int:
    """Print what a request on several jobs did. Exit 0 when it did what was
    asked (a lane with nothing to do included); 6 (and why, on stderr) for
    each named job it left alone; an error if it did nothing at all."""
    if res["skipped"] and not res["jobs"] and not as_json:
        raise errors.IllegalTransition("; ".join(s["why"] for s in res["skipped"][:5])
                                       + (f" (and {len(res['skipped']) - 5} more)" if len(res["skipped"]) > 5 else ""),
                                       hint="See their states with `sloth show ID...`.")
    if as_json:
        emit_json(res)
    else:
        for j in res["jobs"]:
            echo(line(j))
        if not res["jobs"] and not res["skipped"]:
            echo(f"sloth: {none} in lane {lane}", err=True)
    for s in res["skipped"]:
        echo(f"sloth: job {s['id']} left alone: {s['why']}", err=True)
    return errors.EXIT_CONFLICT if res["skipped"] else 0
