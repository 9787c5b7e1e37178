"""What `sloth add` does once its options are read: check them, make the
jobs (one command, or one per line of --stdin/--file), submit them all or
none (submit.py), start the daemon if need be, and print the ids (or wait).

Both readers of the command line end here, with the options commands.py
declares: the Typer app (typer_app.py) and the fast path (fast.py), so an add
does the same whichever read it.
Imported by every `sloth add`: the standard library and light modules only.
"""

from __future__ import annotations

import os
import sys

from sloth_daemon import errors
from sloth_daemon.cli import add_options as opts
from sloth_daemon.cli.connection import connect
from sloth_daemon.cli.fast_add import tell_waiting  # the plain add's too
from sloth_daemon.cli.output import echo, emit_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence

    from sloth_daemon.cli.client import Client

    StrPath = str | os.PathLike[str]


def add(command: Optional[Sequence[str]], *, lane: str = "default", priority: int = 0,
        max_attempts: Optional[int] = None, lease: Optional[str] = None, timeout: Optional[str] = None,
        delay: Optional[str] = None, at: Optional[str] = None, key: Optional[str] = None,
        label: Optional[str] = None, cwd: Optional[StrPath] = None, shell: bool = False, stdin: bool = False,
        from_file: Optional[StrPath] = None, after: Optional[Sequence[str]] = None,
        after_any: Optional[Sequence[str]] = None, chain: bool = False, chain_any: bool = False,
        retry_exit: Optional[str] = None, no_retry_exit: Optional[str] = None, hold: bool = False, wait: bool = False,
        no_start: bool = False, as_json: bool = False, anywhere: bool = False, on: Optional[str] = None,
        keep_awake: bool = False, mem: Optional[str] = None, cpus: Optional[str] = None,
        nice: Optional[int] = None, io: Optional[str] = None,
        when: Optional[Sequence[str]] = None, on_lost: Optional[str] = None,
        needs: Optional[Sequence[str]] = None, slots: Optional[int] = None, batch: Optional[str] = None,
        each: Optional[Sequence[str]] = None, each_file: Optional[str] = None, range_: Optional[str] = None,
        grid: Optional[Sequence[str]] = None, on_dup: Optional[str] = None,
        ping: Optional[Sequence[str]] = None, webhook: Optional[Sequence[str]] = None, webhook_on: Optional[str] = None,
        mail_to: Optional[Sequence[str]] = None, mail_on: Optional[str] = None,
        stall: Optional[str] = None, fail_on: Optional[str] = None, retry_on: Optional[Sequence[str]] = None,
        no_retry_on: Optional[Sequence[str]] = None, backoff: Optional[str] = None) -> int:
    """Queue the command (or the lines of --stdin/--file, or an array's
    members: add_arrays.py) with these options, as `sloth add` was given
    them; print the ids. Returns the exit code; raises SlothError for the
    edge to print."""
    many = stdin or from_file is not None
    if hold and wait:
        raise errors.BadRequest("--hold and --wait together would wait forever: a held job starts only when "
                                "released; nothing was queued",
                                hint="Queue it with --hold, then `sloth release ID` and `sloth wait ID`.")
    words, at = opts.stray_words(list(command) if command else None, at)
    array = None
    if each or each_file or range_ or grid:
        from sloth_daemon.cli import add_arrays

        words, grid = add_arrays.grid_words(words, list(grid) if grid else None)
        array = add_arrays.members(each=each, each_file=each_file, range_=range_, grid=grid, stdin_used=stdin)
    check_usage(words, many=many, delay=delay, at=at, key=key, array=array is not None, on_dup=on_dup)
    common = common_fields(
        cwd=cwd, not_before=opts.not_before(delay, at), **opts.dep_fields(after, after_any),
        hold=True if hold else None, **opts.rules_fields(stall, fail_on, retry_on, no_retry_on, backoff),
        **opts.job_fields(lane=lane, priority=priority, max_attempts=max_attempts, lease=lease, timeout=timeout,
                          label=label, retry_exit=retry_exit, no_retry_exit=no_retry_exit, anywhere=anywhere, on=on,
                          keep_awake=keep_awake, mem=mem, cpus=cpus, nice=nice, io=io, when=when, on_lost=on_lost,
                          needs=needs, slots=slots),
        **opts.tell_fields(ping, webhook, webhook_on, mail_to, mail_on))
    if many:
        jobs, where = lines_as_jobs(sys.stdin.buffer.read() if stdin else read_file(from_file),
                                    "--stdin" if stdin else f"--file {from_file}")
        jobs = opts.chain(jobs, opts.chain_mode(chain, chain_any))
    elif array is not None:
        from sloth_daemon.cli.add_arrays import expand

        jobs = opts.chain(expand(list(words or []), shell, array), opts.chain_mode(chain, chain_any))
        where = _member_of(jobs)
    elif chain or chain_any:
        raise errors.BadRequest("--chain links the lines of --stdin/--file or an array's members",
                                hint="For one job use --after ID.")
    else:
        argv = ["/bin/sh", "-c", " ".join(words or [])] if shell else list(words or [])
        jobs, where = [{"command": argv, "shell": shell, **({"key": key} if key is not None else {}),
                        **({"on_dup": on_dup} if on_dup is not None else {})}], _no_line
    import time

    asked_at = time.time()
    handle = {"name": batch} if many or array is not None or batch is not None else None
    kept = _kept(no_start) if wait else None  # --wait: the commit's connection streams the wait
    ids, tag = submit(jobs, common, no_start=no_start, where=where, handle=handle, connect=kept)
    if key is not None:
        _tell_reused(ids[0], key, asked_at)
    if tag is not None:
        _tell_batch(tag, len(ids))
    return _tell(ids, wait=wait, as_json=as_json, extra={"batch": tag} if tag is not None else {},
                 client=kept.client if kept is not None else None)


def _member_of(jobs: list[dict[str, Any]]) -> Callable[[int], str]:
    """Where an array's job came from: "member 7 (lr=0.1 bs=32)"."""
    from sloth_daemon.text import showable

    return lambda i: f"member {i + 1} ({showable(jobs[i]['member']['value'])[:60]})"


def _tell_batch(tag: dict[str, Any], n: int) -> None:
    """On stderr, the handle of the batch just queued (stdout stays the ids)."""
    from sloth_daemon.text import showable

    name = f" {showable(tag['name'])!r}" if tag.get("name") else ""
    echo(f"sloth: batch {tag['id']}{name}: {n:,} job{'s' if n != 1 else ''} "
         f"(`sloth wait --batch {tag['id']}`, `sloth show --batch {tag['id']}`)", err=True)


def _kept(no_start: bool) -> Any:
    from sloth_daemon.cli.submit import Kept

    return Kept(lambda: connect_or_start(no_start))


def _tell_reused(jid: int, key: str, asked_at: float) -> None:
    """--key that an unfinished job has already: what its policy did, on
    stderr (stdout stays the id). keep: the daemon gave that job's id back
    instead of a new one; replace, append: the new job's ``key`` event says
    (backends/rules.py: key_plan); fail is an error (exit 6), not a note."""
    from sloth_daemon.cli.connection import call

    try:
        shown = call("show", id=jid)
    except errors.SlothError:
        return  # the id was printed; this note is all that is lost
    job = shown["job"]
    from sloth_daemon.text import showable

    if job["created_at"] >= asked_at:  # a new job: what its key's policy did, if anything
        said = [e["message"] for e in shown.get("events") or [] if e.get("kind") == "key"]
        if said:
            echo(f"sloth: --key {showable(key)!r}: job {jid} {showable(said[-1])}", err=True)
        return

    st = job["state"]
    done = st in ("done", "failed", "cancelled")
    echo(f"sloth: --key {showable(key)!r}: {'already ran' if done else 'already queued'} as job {jid} ({st}); "
         "nothing new was queued", err=True)


def _tell(ids: list[int], *, wait: bool, as_json: bool, extra: dict[str, Any], client: Any = None) -> int:
    if wait:
        from sloth_daemon.cli.wait import wait_for

        return wait_for(ids, stream=sys.stderr, as_json=as_json, json_extra={"ids": ids, **extra},
                        before=None if as_json else "\n".join(map(str, ids)), client=client)
    if as_json:
        emit_json({"ids": ids, **extra})
    else:
        echo("\n".join(map(str, ids)))
    return 0


def check_usage(command: Optional[list[str]], *, many: bool, delay: Optional[str], at: Optional[str],
                key: Optional[str], array: bool = False, on_dup: Optional[str] = None) -> None:
    if delay is not None and at is not None:
        raise errors.BadRequest("--delay and --at cannot be used together")
    if many and command:
        raise errors.BadRequest("give either a command or --stdin/--file, not both")
    if not many and not command:
        raise errors.BadRequest("no command given",
                                hint="Put the command after --, e.g. `sloth add -- make test`.")
    if many and key is not None:
        raise errors.BadRequest("--key applies to one job; it cannot be used with --stdin/--file")
    if array and (many or key is not None):
        raise errors.BadRequest("an array's jobs are made from the command (a template); "
                                + ("not from --stdin/--file" if many else "--key applies to one job"),
                                hint="e.g. `sloth add --each 'a b c' -- ./process {}`.")
    if on_dup is not None and key is None:
        raise errors.BadRequest("--on-dup says what to do when --key is taken: give --key too")


def common_fields(*, cwd: Optional[StrPath], **fields: Any) -> dict[str, Any]:
    """What every job of one `sloth add` shares: the caller's folder and
    environment, and the options given (those not given are left out, so
    the daemon's defaults apply)."""
    common = {"cwd": caller_cwd(cwd), "env": dict(os.environ), **fields}
    return {k: v for k, v in common.items() if v is not None}


def caller_cwd(cwd: Optional[StrPath]) -> str:
    """The absolute folder a job runs in: ``cwd`` (relative to the current
    folder) or the current folder itself. Raises BadRequest if it is gone."""
    try:
        workdir = os.path.abspath(cwd) if cwd is not None else os.getcwd()
    except FileNotFoundError:
        raise errors.BadRequest("the current folder no longer exists (was it deleted or moved?)",
                                hint="cd to an existing folder, or give the job's folder with --cwd DIR.") from None
    except OSError as e:
        raise errors.BadRequest(f"cannot tell the current folder: {e.strerror or e}",
                                hint="Give the job's folder with --cwd DIR.") from None
    if cwd is not None and not os.path.isdir(workdir):
        raise errors.BadRequest(f"--cwd {workdir} is not a folder")
    return workdir


def lines_as_jobs(data: bytes, source: str) -> tuple[list[dict[str, Any]], Callable[[int], str]]:
    """One job per non-blank line (a backslash at its end continues it, as
    in sh), and where each came from ("line 7 of --stdin")."""
    from sloth_daemon.cli.shell_check import logical_lines
    from sloth_daemon.cli.shell_lines import line_job

    # Bytes that are not UTF-8 pass through as in argv (surrogateescape), not a traceback.
    text = data.decode("utf-8", "surrogateescape")
    numbered = [(n, ln) for n, ln in logical_lines(text) if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise errors.BadRequest("no commands on input (one per line)")
    return [line_job(ln) for _, ln in numbered], lambda i: f"line {numbered[i][0]} of {source}"


def _no_line(i: int) -> str:
    return ""


def read_file(p: Optional[StrPath]) -> bytes:
    try:
        with open(p, "rb") as f:  # type: ignore[arg-type]
            return f.read()
    except OSError as e:
        raise errors.BadRequest(f"cannot read {p}: {e.strerror or e}") from None


def submit(jobs: list[dict[str, Any]], common: dict[str, Any], *, no_start: bool,
           where: Callable[[int], str], handle: Optional[dict[str, Any]] = None, connect: Any = None
           ) -> tuple[list[int], Optional[dict[str, Any]]]:
    """All or none (submit.py): checked before a daemon is started or a byte
    sent. Returns the ids and, with ``handle``, the batch's {id, name}."""
    from sloth_daemon.cli import submit as sub

    sub.check(jobs, common, where=where)
    check_shell(jobs, where, cwd=common["cwd"])
    parts = sub.frames(jobs, common, where=where)
    res = sub.submit(jobs, common, parts, connect or (lambda: connect_or_start(no_start)), handle=handle)
    opts.tell_new_lanes(res)
    tell_waiting(res.get("waiting") or {})
    return list(res["ids"]), res.get("handle")


def check_shell(jobs: list[dict[str, Any]], where: Callable[[int], str], nothing: str = "nothing was queued",
                cwd: Optional[str] = None) -> None:
    """Every job's shell text parses (`sh -n`, nothing runs: shell_check.py):
    each --shell line, and the script of each ``sh -c``/``bash -c`` with
    that shell's own -n; and no job's program is a shell line, which would
    be looked up as a program of that name (in ``cwd``, the jobs' folder) and fail. Else none is queued,
    and the job that is wrong is named. A job with no command (a schedule's
    edit of its other settings) has nothing to check."""
    from sloth_daemon.cli import shell_check

    shelled = [i for i, j in enumerate(jobs) if j.get("shell") and j.get("command")]
    bad = shell_check.first_error([jobs[i]["command"][-1] for i in shelled]) if shelled else None
    if bad is not None:
        _not_shell(where(shelled[bad[0]]), shell_check.SH, jobs[shelled[bad[0]]]["command"][-1], bad[1], nothing,
                   many=len(jobs) > 1)
    for i, job in enumerate(jobs):
        argv = job.get("command") or [] if not job.get("shell") else []
        if argv and shell_check.is_shell_line(argv[0], cwd):
            _a_shell_line(where(i), argv, nothing)
        found = shell_check.shell_script(argv, cwd)
        if found is not None and (said := shell_check.parse_error(found[1], found[0])) is not None:
            _not_shell(where(i), found[0], found[1], said, nothing, many=len(jobs) > 1)


def _not_shell(place: str, sh: str, script: str, said: str, nothing: str, *, many: bool) -> None:
    from sloth_daemon.cli.shell_check import message
    from sloth_daemon.text import showable

    raise errors.BadRequest(
        f"{place + ': ' if place else ''}{showable(script)[:200]!r} is not a shell command "
        f"{os.path.basename(sh)} can read ({message(said)}); {nothing}",
        hint="Fix its quoting (`sh -n -c 'LINE'` checks a line without running it)"
             + ("; every line is checked before any is queued." if many else "."))


def _a_shell_line(place: str, argv: list[str], nothing: str) -> None:
    """Refuse a program word that is a shell line, with the command that runs it as one."""
    from sloth_daemon.text import shell_command, shell_word, showable

    from sloth_daemon.cli.shell_check import is_assignment

    line = " ".join([argv[0], *map(shell_word, argv[1:])])
    words = argv[0].split()  # only blanks in it ("python3 train.py"): its words, given apart, mean it
    apart = not any(c in "|;&<>$`()~" for c in argv[0])
    what = "sets a variable, as a shell line does" if words == [argv[0]] and is_assignment(argv[0]) \
        else "is a shell line given as one word"
    if words and is_assignment(words[0]):  # FOO=1 make: env sets it, as the shell would
        words = ["env", *words]
    raise errors.BadRequest(
        f"{place + ': ' if place else ''}{showable(argv[0])[:200]!r} {what}: it would "
        f"be run as a program of that name, and no program has it; {nothing}",
        hint=f"Run it through sh with --shell: `{shell_command('sloth', 'add', '--shell', '--', line)}`"
             + (f", or give each word on its own: `{shell_command('sloth', 'add', '--', *words, *argv[1:])}`."
                if apart else "."))


def connect_or_start(no_start: bool) -> Client:
    """The daemon, started if none runs (connection.connect says so), unless --no-start."""
    return connect(start=not no_start)
