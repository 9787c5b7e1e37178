"""`sloth schedule add | ls | show | pause | resume | rm | run | edit`:
named recipes that queue ordinary jobs (daemon/schedules/ decides when).

`add` and `edit` take `sloth add`'s job options (the job each occurrence
is) and the schedule's own: --every or --cron, --tz, --missed, --overlap,
--jitter. Every command has --json. The daemon checks everything (a bad
cron expression, duration, zone, an unknown or taken name): an error
changes nothing. `ls` and `show` read: they ask the daemon, or read the
queue when none runs (offline.py), and never start one; both are on the
fast path (no Typer, nothing heavy imported: the daemon describes a
schedule, cronsim stays there)."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call, call_or_read
from sloth_daemon.cli.output import echo, emit_json
from sloth_daemon.cli.values import command_after_dashes, duration
from sloth_daemon.text import shell_command, showable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence

    Text = Optional[str]


def add(words: Sequence[str], *, every: Text = None, cron: Text = None, tz: Text = None, missed: Text = None,
        overlap: Text = None, jitter: Text = None, lane: str = "default", priority: int = 0, max_attempts: Any = None,
        lease: Text = None, timeout: Text = None, label: Text = None, cwd: Any = None, shell: bool = False,
        retry_exit: Text = None, no_retry_exit: Text = None, anywhere: bool = False, on: Text = None,
        keep_awake: bool = False, mem: Text = None, cpus: Text = None, nice: Optional[int] = None, io: Text = None,
        when: Optional[Sequence[str]] = None, on_lost: Text = None, needs: Optional[Sequence[str]] = None,
        slots: Optional[int] = None, ping: Any = None, webhook: Any = None, webhook_on: Text = None,
        mail_to: Any = None, mail_on: Text = None, expect_within: Text = None, stall: Text = None,
        fail_on: Text = None, retry_on: Optional[Sequence[str]] = None, no_retry_on: Optional[Sequence[str]] = None,
        backoff: Text = None, no_start: bool = False, as_json: bool = False) -> None:
    """`sloth schedule add NAME (--every D | --cron EXPR) [options] -- CMD ARGS...`."""
    options = dict(locals())
    name, command = _split(words, need_command=True)
    from sloth_daemon.cli.add import connect_or_start

    recipe = {**_when(options), "job": _checked(_job(command, options), "the schedule was not added")}
    with connect_or_start(no_start) as c:
        res = _named(lambda: c.call("schedule_add", name=name, recipe=recipe), "the schedule was not added")
    _tell(res, as_json, "added")


def edit(words: Sequence[str], *, every: Text = None, cron: Text = None, tz: Text = None, missed: Text = None,
         overlap: Text = None, jitter: Text = None, lane: Text = None, priority: Any = None, max_attempts: Any = None,
         lease: Text = None, timeout: Text = None, label: Text = None, cwd: Any = None, shell: Any = None,
         retry_exit: Text = None, no_retry_exit: Text = None, anywhere: Any = None, on: Text = None,
         keep_awake: Any = None, mem: Text = None, cpus: Text = None, nice: Optional[int] = None, io: Text = None,
         when: Optional[Sequence[str]] = None, on_lost: Text = None, needs: Optional[Sequence[str]] = None,
         slots: Optional[int] = None, ping: Any = None, webhook: Any = None, webhook_on: Text = None,
         mail_to: Any = None, mail_on: Text = None, expect_within: Text = None, stall: Text = None,
         fail_on: Text = None, retry_on: Optional[Sequence[str]] = None, no_retry_on: Optional[Sequence[str]] = None,
         backoff: Text = None, as_json: bool = False) -> None:
    """`sloth schedule edit NAME [options] [-- CMD ARGS...]`: only what is given changes."""
    options = dict(locals())
    name, command = _split(words, need_command=False)
    recipe: dict[str, Any] = _when(options)
    job = _checked(_job(command, options, edit=True), "the schedule was not changed")
    if job:
        recipe["job"] = job
    if not recipe:
        raise errors.BadRequest("nothing to change", hint="Give the options to change, e.g. --every 2h.")
    _tell(_named(lambda: call("schedule_edit", name=name, recipe=recipe), "the schedule was not changed"),
          as_json, "changed")


def _named(ask: Callable[[], Any], nothing: str) -> Any:
    """``ask()``; what only the daemon could check (the job with an edit over
    it: a --retry-on its --no-retry-on names) named as the option, as the
    client's own checks name it."""
    try:
        return ask()
    except errors.FieldError as e:
        from sloth_daemon.cli.submit import as_option

        raise as_option(e, nothing) from None


def ls(*, as_json: bool = False) -> None:
    res = call_or_read("schedule_ls")
    if as_json:
        emit_json(res)
        return
    if not res["schedules"]:
        echo("no schedules (add one: sloth schedule add NAME --every 1d -- CMD)")
        return
    from sloth_daemon.cli import render

    echo(render.table(["NAME", "WHEN", "NEXT", "LAST", "OUTCOME", ""], [_row(s) for s in res["schedules"]]))


def show(name: str, *, limit: int = 20, as_json: bool = False) -> None:
    res = call_or_read("schedule_show", name=name, limit=limit)
    if as_json:
        emit_json(res)
        return
    s = res["schedule"]
    for line in _details(s):
        echo(line)
    echo("occurrences (latest first):" if res["runs"] else "no occurrences yet")
    for r in res["runs"]:
        echo("  " + _run(r))


def pause(name: str, *, as_json: bool = False) -> None:
    _tell(call("schedule_pause", name=name), as_json, "paused")


def resume(name: str, *, as_json: bool = False) -> None:
    _tell(call("schedule_resume", name=name), as_json, "resumed")


def rm(name: str, *, as_json: bool = False) -> None:
    res = call("schedule_rm", name=name)
    emit_json(res) if as_json else echo(f"schedule {name} removed (its jobs stay)")


def run(name: str, *, as_json: bool = False) -> None:
    res = call("schedule_run", name=name)
    if as_json:
        emit_json(res)
    else:
        echo(str(res["id"]) + ("  (already queued or running: that job)" if res["deduped"] else ""))


# ------------------------------------------------------------------ parts
def _split(words: Sequence[str], *, need_command: bool) -> tuple[str, list[str]]:
    words = list(words or [])
    if not words:
        raise errors.BadRequest("no schedule name given", hint="e.g. sloth schedule add nightly --every 1d -- CMD")
    name = words[0]
    usage = shell_command("sloth", "schedule", "edit", name)
    command = words[1:] if need_command else command_after_dashes(words, usage)
    if need_command and not command:
        raise errors.BadRequest("no command given", hint="Put the command after --, e.g. `... -- make backup`.")
    return name, command


def _when(o: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if o.get("every") is not None:
        out["every_s"] = duration(o["every"], "--every")
    for key in ("cron", "tz", "missed", "overlap"):
        if o.get(key) is not None:
            out[key] = o[key]
    if o.get("jitter") is not None:
        out["jitter_s"] = duration(o["jitter"], "--jitter")
    if o.get("expect_within") is not None:
        out["expect_within_s"] = duration(o["expect_within"], "--expect-within")
        if out["expect_within_s"] < 60:
            raise errors.BadRequest(f"--expect-within {o['expect_within']}: at least 1m (a window for a success)",
                                    hint="e.g. --expect-within 26h for a daily job.")
    return out


def _job(command: list[str], o: dict[str, Any], *, edit: bool = False) -> dict[str, Any]:
    """The job each occurrence is: `sloth add`'s fields (those given)."""
    from sloth_daemon.cli import add_options as opts
    from sloth_daemon.cli.add import common_fields

    job: dict[str, Any] = {}
    if command:
        shell = bool(o.get("shell"))
        job = {"command": ["/bin/sh", "-c", " ".join(command)] if shell else command, "shell": shell}
    fields = {"lane": o.get("lane"), "priority": o.get("priority"), "max_attempts": o.get("max_attempts"),
              "lease_s": duration(o.get("lease"), "--lease"), "timeout_s": duration(o.get("timeout"), "--timeout"),
              "label": o.get("label"), **opts.retry_fields(o.get("retry_exit"), o.get("no_retry_exit")),
              **opts.place_fields(bool(o.get("anywhere")), o.get("on")),
              **opts.hold_fields(bool(o.get("keep_awake")), o.get("mem"), o.get("cpus"), o.get("nice"), o.get("io")),
              **opts.gate_fields(o.get("when"), o.get("on_lost"), o.get("needs"), o.get("slots")),
              **opts.tell_fields(o.get("ping"), o.get("webhook"), o.get("webhook_on"), o.get("mail_to"),
                                 o.get("mail_on")),
              **opts.rules_fields(o.get("stall"), o.get("fail_on"), o.get("retry_on"), o.get("no_retry_on"),
                                  o.get("backoff"))}
    if edit:
        return {**job, **{k: v for k, v in fields.items() if v is not None},
                **({"cwd": common_fields(cwd=o["cwd"])["cwd"]} if o.get("cwd") else {})}
    return {**job, **common_fields(cwd=o.get("cwd"), **fields)}


def _checked(job: dict[str, Any], nothing: str) -> dict[str, Any]:
    """``job``, once its shell line parses (`sh -n`, as `sloth add --shell`
    checks): every occurrence would fail on it, and be retried. Its options
    are the daemon's to check (a refusal named as the option: _named)."""
    from sloth_daemon.cli.add import check_shell

    check_shell([job], lambda i: "", nothing)
    return job


def _tell(res: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        emit_json(res)
        return
    s = res["schedule"]
    echo(f"schedule {s['name']} {what}: {showable(s['spec'])}; next {_when_text(s)}")


def _when_text(s: dict[str, Any]) -> str:
    from sloth_daemon.durations import local_time, relative

    if s["paused"]:
        return "- (paused)"
    return f"{local_time(s['next_run'])} ({relative(s['next_run'])})"


def _row(s: dict[str, Any]) -> list[str]:
    from sloth_daemon.durations import relative

    last = relative(s["last_run"]) if s.get("last_run") else "-"
    outcome = s["last_state"] or "-"
    if s["last_exit"] not in (None, 0):
        outcome += f" (exit {s['last_exit']})"
    flag = "paused" if s["paused"] else f"overdue since {relative(s['overdue'])}" if s.get("overdue") else ""
    return [s["name"], showable(s["spec"]), _when_text(s), last, outcome, flag]


def _details(s: dict[str, Any]) -> list[str]:
    from sloth_daemon.cli import render
    from sloth_daemon.durations import format_duration
    from sloth_daemon.text import shell_command

    jitter = f"{s['jitter_s']:g}s (here +{s['jitter_offset_s']:.0f}s)" if s["jitter_s"] else "none"
    return [f"schedule {s['name']}: {showable(s['spec'])}" + ("  (paused)" if s["paused"] else ""),
            f"  command: {showable(shell_command(*(s['command'] or [])))}",
            f"  next:    {_when_text(s)}" + (f"  (slot {_at(s['next_slot'])} + jitter)"
                                             if s["jitter_s"] and not s["paused"] else ""),
            f"  if missed: {s['missed']}   if still running: {s['overlap']}   jitter: {jitter}",
            f"  lane {showable(s['lane'])}, runs {_where(s['place'])};"
            f" slots missed so far {s['missed_slots']}, dropped {s['dropped']}",
            *render.option_lines(s.get("job_options") or {}), *render.tell_lines(s.get("tell")),
            *([f"  expect a success within {format_duration(s['expect_within_s'])}"
               + (f": OVERDUE since {_at(s['overdue'])}" if s.get("overdue") else "")]
              if s.get("expect_within_s") else [])]


def _where(place: str | None) -> str:
    """Where its jobs run, in words: no place is this machine (the default), "*" anywhere."""
    if not place:
        return "on this machine"
    return "anywhere" if place == "*" else f"on {showable(place)}"


def _at(t: int) -> str:
    from sloth_daemon.durations import local_time

    return local_time(t)


def _run(r: dict[str, Any]) -> str:
    from sloth_daemon.durations import local_time

    job = f"job {r['job_id']} {r['state'] or 'pruned'}" if r["job_id"] else "no job"
    if r.get("exit_code") not in (None, 0):
        job += f" (exit {r['exit_code']})"
    kind = "run by hand" if r["manual"] else f"slot {local_time(r['slot'])}"
    note = f"  -- {showable(r['note'])}" if r["note"] and not r["manual"] else ""
    return f"{kind}: {job}{note}"


