"""Human output: tables, colours (off with NO_COLOR or when not a tty), job lines."""

from __future__ import annotations

import os
import sys
import time

from sloth_daemon.durations import format_duration, local_time, relative
from sloth_daemon.errors import SlothError
from sloth_daemon.text import showable

TYPE_CHECKING = False
if TYPE_CHECKING:  # not at run time: `sloth ls` and `show` pay for every import
    from typing import Any, Sequence

_COLOURS = {"blocked": "35", "queued": "33", "held": "34", "running": "36", "done": "32", "failed": "31",
            "cancelled": "90"}


def use_colour(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    return hasattr(stream, "isatty") and stream.isatty()


def paint(text: str, state: str) -> str:
    code = _COLOURS.get(state)
    return f"\x1b[{code}m{text}\x1b[0m" if code and use_colour() else text


def terminal_width(stream: Any = None) -> int | None:
    """The columns of the terminal ``stream`` (stdout) is; None when it is
    not one (piped: nothing is cut to fit)."""
    stream = stream or sys.stdout
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (OSError, ValueError, AttributeError):
        return None


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, an ellipsis where it was cut."""
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


LAST_MIN = 12  # a table fitted to the terminal keeps at least this much of its last column


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], states: Sequence[str] | None = None,
          *, widths: list[int] | None = None, header: bool = True, fit: int | None = None) -> str:
    """``widths``: the columns' widths so far, grown in place to fit these
    rows (a table printed a block at a time keeps its columns as wide as
    the rows before needed); ``header``: begin with the headers' line;
    ``fit``: the terminal's width, which the last column is cut to fit
    (rows that wrap cannot be read as a table)."""
    widths = [len(h) for h in headers] if widths is None else widths
    for r in rows:
        for i, cell in enumerate(r[:-1]):
            widths[i] = max(widths[i], len(cell))
    last = None if fit is None else max(fit - 1 - sum(w + 2 for w in widths[:len(headers) - 1]), LAST_MIN)

    def fmt(r: Sequence[str]) -> str:
        cells = [c.ljust(widths[i]) for i, c in enumerate(r[:-1])] + [r[-1] if last is None else cut(r[-1], last)]
        return "  ".join(cells).rstrip()
    out = [fmt(headers)] if header else []
    for i, r in enumerate(rows):
        line = fmt(r)
        if states is not None:
            st = states[i]
            line = line.replace(st, paint(st, st), 1)
        out.append(line)
    return "\n".join(out)


def command_text(job: dict[str, Any], width: int | None = 60) -> str:
    cmd = job["command"]
    if job.get("shell") and len(cmd) == 3 and cmd[1] == "-c":
        text = cmd[2]
    else:
        text = shell_join(cmd)
    if job.get("label"):
        text = f"[{job['label']}] {text}"
    text = showable(text)  # a newline or an escape sequence must not break the table
    return cut(text, width) if width else text


# What shlex.quote leaves unquoted: [\w@%+=:,./-] in ASCII.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def shell_join(args: Sequence[str]) -> str:
    """shlex.join(args), the same text, without importing shlex and re
    (`sloth ls` shows a command on every row)."""
    return " ".join(a if a and _SAFE.issuperset(a) else "'" + a.replace("'", "'\"'\"'") + "'" for a in args)


def when(job: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    st = job["state"]
    if st == "blocked":
        waits = [*job.get("after", []), *job.get("after_any", [])]
        return "after " + ",".join(map(str, waits[:3])) + ("…" if len(waits) > 3 else "")
    if st == "held":  # a reason: this machine can never run it as it is (daemon/worker/gates.py: Gates.never)
        return showable(job["wait_reason"]) if job.get("wait_reason") else "until released"
    if st == "queued":
        if job["not_before"] <= now and job.get("wait_reason"):
            return showable(job["wait_reason"])  # "waiting for mains power": its gate does not hold
        return "due" if job["not_before"] <= now else relative(job["not_before"], now)
    if st == "running":
        started = (job.get("runner") or {}).get("started_at") or job["updated_at"]
        return f"{shown_state(job)} {format_duration(now - started)}"
    return relative(job.get("finished_at") or job["updated_at"], now)


def job_headers(extra: Sequence[tuple[str, Any]] = ()) -> list[str]:
    """JOB_HEADERS with ``extra`` columns (cli/progress_view.columns) before COMMAND."""
    return JOB_HEADERS[:-1] + [h for h, _ in extra] + JOB_HEADERS[-1:]


def job_rows(jobs: Sequence[dict[str, Any]],
             extra: Sequence[tuple[str, Any]] = ()) -> tuple[list[list[str]], list[str]]:
    now = time.time()
    rows, states = [], []
    for j in jobs:
        waited, ran = timing(j, now)
        rows.append([
            str(j["id"]), shown_state(j), showable(j["lane"]), str(j["priority"]),
            f"{j.get('tries', j['attempts'])}/{j['max_attempts']}", cut(when(j, now), WHEN_WIDTH), _secs(waited),
            _secs(ran), *(cell(j) for _, cell in extra),
            command_text(j),
        ])
        states.append(shown_state(j))
    return rows, states


def held_lines(job: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> list[str]:
    """What the keeper holds for the job's runs: keep-awake as its last run
    had it (the history's word: held, or why not), and each limit with how
    it is applied."""
    out = [f"  awake     {awake_text(job, events)}"] if job.get("keep_awake") else []
    limits = job.get("limits") or {}
    via = limits.get("via") or {}
    parts = []
    for k in ("mem", "cpus", "nice", "io"):
        if limits.get(k) is not None:
            from sloth_daemon.checks import format_size  # here: `add --wait` renders outcomes, never limits

            v = format_size(int(limits[k])) if k == "mem" else str(limits[k])
            parts.append(f"{k} {v}" + (f" via {via[k]}" if via.get(k) else ""))
    if parts:
        out.append("  limits    " + "; ".join(parts))
    return out


def awake_text(job: dict[str, Any], events: Sequence[dict[str, Any]]) -> str:
    """--keep-awake as it was had: the keeper's word on the latest run that
    has one, else what is asked (not run yet, or not seen holding yet)."""
    said = [e for e in events if e.get("kind") == "keep-awake"]
    if said:
        last = said[-1]
        return f"attempt {last.get('attempt')}: {showable(str(last.get('message') or ''))}"
    if job.get("state") == "running":
        return "asked (--keep-awake); not seen held yet"
    return "asked (--keep-awake): held while it runs"


def shown_state(job: dict[str, Any]) -> str:
    """A job's state as a listing shows it: a running job paused on request is ``paused``."""
    return "paused" if job.get("paused") and job["state"] == "running" else job["state"]


JOB_HEADERS = ["ID", "STATE", "LANE", "PRI", "TRY", "WHEN", "WAITED", "RAN", "COMMAND"]
WHEN_WIDTH = 30  # a listing's WHEN at most (why a job waits, cut: `sloth show` has it whole)
_FINISHED = ("done", "failed", "cancelled")


def timing(job: dict[str, Any], now: float,
           events: Sequence[dict[str, Any]] | None = None) -> tuple[float | None, float | None]:
    """(waited_s, ran_s) of a job's latest try, from its columns.

    ran: from its latest run's start to its end (or to now while it runs).
    waited: how long that try was due but not running, from when it could
    first run (added; or its --at/--delay time, its prerequisites' end or
    a retry's backoff, whichever came last) until it started (or until now
    while it is queued and due; or until it ended, if it was cancelled
    first). None where it does not apply: never ran; not due yet; blocked."""
    st, due = job["state"], max(job["created_at"], job["not_before"])
    started = _started(job, due, events)
    if started is None and st == "running" and job["updated_at"] >= due - 0.05:
        started = job["updated_at"]  # its claim: the process is recorded a second into the run (as `when` reads it)
    end = now if st == "running" else job.get("finished_at")
    ran = None
    if started is not None and job["attempts"] and end is not None and end >= started:
        if st == "running" or st in _FINISHED:
            ran = end - started
    if st == "queued":
        return (now - due if due <= now else None), None
    if st == "running" and started is None:
        return None, None  # its process is recorded after its first second (or seen in its history)
    if st == "blocked":
        return None, None
    if ran is None:  # ended before it ever ran (cancelled, or its prerequisite failed)
        stop = job.get("finished_at")
        return (stop - due if stop is not None and stop >= due and not job["attempts"] else None), None
    return (started - due if due <= started else None), ran


def _started(job: dict[str, Any], due: float, events: Sequence[dict[str, Any]] | None) -> float | None:
    """When the latest try's run started: its history's start (or claim) if
    given, else the recorded process's -- the runner column is written a
    second into a run, so until then it is the try before's: refused when
    it started before this try was due."""
    if events:
        mine = [e for e in events if e["attempt"] == job["attempts"] and e["kind"] in ("claimed", "reclaimed",
                                                                                      "started")]
        starts = [e["at"] for e in mine if e["kind"] == "started"] or [e["at"] for e in mine]
        if starts:
            return float(starts[-1])
    started = (job.get("runner") or {}).get("started_at")
    return started if isinstance(started, (int, float)) and started >= due - 0.05 else None


def _secs(v: float | None) -> str:
    return "-" if v is None else format_duration(v)


def with_timing(job: dict[str, Any], now: float) -> dict[str, Any]:
    """The job with ``waited_s`` and ``ran_s`` (timing's), for --json."""
    waited, ran = timing(job, now, job.get("events"))
    return {**job, "waited_s": waited, "ran_s": ran}


def show_job(job: dict[str, Any], events: Sequence[dict[str, Any]], *,
             prereqs: Sequence[dict[str, Any]] = (), dependents: Sequence[int] = (),
             log_tail: Sequence[str] = ()) -> str:
    """`sloth show`: the job, its history with human times, and for a
    failed job the last lines of its log."""
    now = time.time()
    lines = [
        f"job {job['id']}  {paint(job['state'], job['state'])}{'  (paused)' if shown_state(job) == 'paused' else ''}",
        f"  command   {command_text(job, None)}",
        f"  lane      {showable(job['lane'])}  priority {job['priority']}",
        f"  attempts  {_attempts(job, events)}",
        f"  created   {local_time(job['created_at'])} ({relative(job['created_at'], now)})",
    ]
    waited, ran = timing(job, now, events)
    if waited is not None or ran is not None:
        lines.append(f"  waited    {_secs(waited)}" + (f"  ran {format_duration(ran)}" if ran is not None else "")
                     + (" (running)" if job["state"] == "running" and ran is not None else ""))
    if job["state"] == "queued":
        lines.append(f"  due       {local_time(job['not_before'])} ({relative(job['not_before'], now)})")
    if job.get("lease_until"):
        lines.append(f"  lease     until {local_time(job['lease_until'])} ({relative(job['lease_until'], now)})")
    if job.get("timeout_s"):
        lines.append(f"  timeout   {format_duration(job['timeout_s'])}")
    if job.get("cwd"):
        lines.append(f"  cwd       {showable(job['cwd'])}")
    if job.get("key"):
        lines.append(f"  key       {showable(job['key'])}")
    if job.get("runner"):
        lines.append(f"  pid       {job['runner'].get('pid')}")
    lines += held_lines(job, events) + run_lines(job)
    lines += _relations(prereqs, dependents) + _gate(job) + rules_lines(job) + tell_lines(job.get("tell"))
    if job.get("message"):
        lines.append(f"  message   {showable(job['message'])}")
    lines += _history(job, events)
    if log_tail:
        lines.append(f"  last lines of its log (attempt {job['attempts']})")
        lines += [f"    | {ln}" for ln in log_tail]
    return "\n".join(lines)


def tell_lines(channels: Sequence[dict[str, Any]] | None) -> list[str]:
    """Who is told (docs/telling.md); a URL comes masked from the daemon."""
    return [f"  tells     {ch['kind']} {showable(ch.get('url') or ', '.join(ch.get('to', [])))}"
            f" on {','.join(ch.get('on', []))}" for ch in channels or ()]


def run_lines(job: dict[str, Any]) -> list[str]:
    """`show`: how far it is (progress, or an estimate said so) and what each attempt cost."""
    from sloth_daemon.cli.progress_view import cost_text, progress_text

    out = [f"  progress  {progress_text(job['progress'])}"] if job.get("progress") else []
    runs = job.get("runs") or []
    out += [f"  cost      attempt {r['attempt']}: {cost_text(r['cost'])}" for r in runs[-5:]]
    if len(runs) > 5:
        out.append(f"            ({len(runs) - 5} earlier attempts: `sloth show --json`)")
    return out


RESULT_SHOWN_CHARS = 200  # of a result, what `show` prints (`sloth result ID` prints all of it)


def rules_lines(job: dict[str, Any]) -> list[str]:
    """Its watchdogs and retry rules (docs/watchdogs.md), and what its attempts handed on."""
    rules, out = job.get("rules") or {}, []
    watch = ([f"stall {format_duration(rules['stall_s'])}"] if rules.get("stall_s") else []) + \
        ([f"fail-on {showable(repr(rules['fail_on']))}"] if rules.get("fail_on") else [])
    if watch:
        out.append("  watch     " + "; ".join(watch))
    retry = ([f"also on {','.join(rules['retry_on'])}"] if rules.get("retry_on") else []) + \
        ([f"never on {','.join(rules['no_retry_on'])}"] if rules.get("no_retry_on") else [])
    if rules.get("backoff_s") or rules.get("backoff_cap_s"):
        base = format_duration(rules["backoff_s"]) if rules.get("backoff_s") else "2s"
        cap = format_duration(rules["backoff_cap_s"]) if rules.get("backoff_cap_s") else "backoff_cap_s"
        retry.append(f"backoff {base}..{cap}")
    if retry:
        out.append("  retries   " + "; ".join(retry))
    for r in job.get("results") or []:
        import json

        text = json.dumps(r["result"], ensure_ascii=False)
        if len(text) > RESULT_SHOWN_CHARS:
            text = text[:RESULT_SHOWN_CHARS] + f"... (`sloth result {job['id']}`)"
        out.append(f"  result    attempt {r['attempt']}: {showable(text)}")
    return out


def option_lines(options: dict[str, Any]) -> list[str]:
    """A schedule's job options (its ``job_options``) as `show` says a job's."""
    gate = {k: options[k] for k in ("when", "on_lost", "needs", "slots") if k in options}
    return _gate({"state": "", "gate": gate}) + held_lines(options) + rules_lines(options)


def _gate(job: dict[str, Any]) -> list[str]:
    """Its run conditions, needs and slots, what its run holds, why it waits."""
    gate, out = job.get("gate") or {}, []
    if gate.get("when"):
        lost = gate.get("on_lost", "continue")
        out.append(f"  when      {' '.join(map(showable, gate['when']))}  (if lost while running: {lost})")
    if gate.get("needs"):
        out.append("  needs     " + ", ".join(f"{showable(k)}={_need(k, v)}" for k, v in gate["needs"].items()))
    if gate.get("slots"):
        out.append(f"  slots     {gate['slots']}")
    if job["state"] == "running" and job.get("tokens"):
        out.append("  tokens    " + ", ".join(f"{showable(k)} {','.join(map(showable, v))}"
                                             for k, v in job["tokens"].items()))
        gpus = [str(t).rpartition("@") for t in job["tokens"].get("gpu") or ()]  # "0@500": 500 milli-shares of 0
        if gpus:
            share = ", ".join(f"{int(m) / 1000:g} of gpu {t}" for t, _, m in gpus if m.isdigit())
            out.append(f"  gpu       CUDA_VISIBLE_DEVICES={','.join(showable(t or m) for t, _, m in gpus)}"
                       + (f"  (shares: {share})" if share else ""))
    if job["state"] == "queued" and job.get("wait_reason"):
        out.append(f"  waiting   {showable(job['wait_reason'])}")
    elif job["state"] == "held" and job.get("wait_reason"):
        out.append(f"  held      {showable(job['wait_reason'])}; `sloth release` once it can run")
    return out


def _need(name: str, v: Any) -> str:
    """gpu-mem as a size (20G), a count or share as it is."""
    if name == "gpu-mem" and isinstance(v, int):
        from sloth_daemon.checks import format_size

        return format_size(v)
    return str(v)


def _relations(prereqs: Sequence[dict[str, Any]], dependents: Sequence[int]) -> list[str]:
    """What a job runs after (and their states now), and what runs after it."""
    out = []
    if prereqs:
        out.append("  after     " + ", ".join(
            f"{p['id']} ({p['state']}{'' if p['need'] == 'done' else ', any result'})" for p in prereqs))
    if dependents:
        out.append("  before    " + ", ".join(map(str, dependents[:20])) + (" …" if len(dependents) > 20 else ""))
    return out


def _history(job: dict[str, Any], events: Sequence[dict[str, Any]]) -> list[str]:
    """In time order: an end the keeper saw while no daemon ran is recorded
    (later) with the time it happened, so the order they were written in
    is not the order they happened in."""
    out = ["  history", f"    {local_time(job['created_at']):>16}  enqueued"]
    for e in sorted(events, key=lambda e: e["at"]):  # stable: the order written breaks ties
        msg = f"  {showable(e['message'])}" if e["message"] else ""
        attempt = f" (attempt {e['attempt']})" if e["attempt"] else ""
        out.append(f"    {local_time(e['at']):>16}  {e['kind']}{attempt}{msg}")
    return out


def outcome(job: dict[str, Any]) -> str:
    """One line on how a job ended: ``job 5 done (exit 0)``, ``job 6 failed: exit 3; ...``."""
    st, msg = job["state"], job.get("message") or ""
    if st == "done":
        return f"job {job['id']} done" + (f" ({msg})" if msg else "")
    return f"job {job['id']} {paint(st, st)}" + (f": {msg}" if msg else "")


def counts_line(counts: dict[str, int], paused: int = 0) -> str:
    """``3 running, 1 paused, 12 queued, 2 blocked; finished: 40 done, 2 failed``;
    ``paused``: how many of the running jobs are paused on request (said apart)."""
    counts = {**counts, "running": counts.get("running", 0) - paused, "paused": paused}
    active = [f"{counts.get(s, 0)} {s}" for s in ("running", "paused", "queued", "held", "blocked") if counts.get(s)]
    ended = [f"{counts.get(s, 0)} {s}" for s in ("done", "failed", "cancelled") if counts.get(s)]
    text = ", ".join(active) or "nothing running or queued"
    return text + (f"; finished: {', '.join(ended)}" if ended else "")


def lanes_line(lanes: dict[str, dict[str, int]]) -> str:
    """``video 2 running, 8 queued · default 1 running``, for lanes with active jobs."""
    parts = []
    for name, c in sorted(lanes.items()):
        bits = [f"{c[s]} {s}" for s in ("running", "queued", "held", "blocked") if c.get(s)]
        if bits:
            parts.append(f"{name} {', '.join(bits)}")
    return " · ".join(parts)


def tail_lines(path: str, n: int = 10, max_bytes: int = 16384) -> list[str]:
    """The last ``n`` lines of a log file ([] if it is missing or unreadable),
    made safe to print (a job's escape sequences stay in its log)."""
    from sloth_daemon.safefile import open_file  # not paths.open_log: pathlib and dataclasses cost a `sloth show`

    try:
        with os.fdopen(open_file(path), "rb") as f:  # never through a link, never a FIFO in its place
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except (OSError, SlothError):
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first may be cut
    return [showable(ln[:300]) for ln in lines[-n:]]


def _attempts(job: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> str:
    """The tries used of those allowed, and, when runs were not all counted,
    why, in plain words (the rules: `sloth show --help`): ``1/3 (2 runs; 1
    not counted: stopped with the daemon)``. Every run counts in
    ``attempts``; ``tries`` counts those since the last user retry (which
    starts the count afresh), less the ones given back: a run interrupted by
    a daemon stop, or cut short by sloth itself (a crash, a lost lease:
    ``refunds`` of those, bounded)."""
    runs, tries = job["attempts"], job.get("tries", job["attempts"])
    text = f"{tries}/{job['max_attempts']}"
    if runs == tries:
        return text
    retries = [e for e in events if e["kind"] == "retried"]
    before = min(int(retries[-1]["attempt"] or 0), runs) if retries else 0
    given = max(0, runs - before - tries)
    notes = [f"{before} before `sloth retry` started the count again"] if retries else []
    if given:
        sloth = min(int(job.get("refunds") or 0), given)
        why = [(n, w) for n, w in ((given - sloth, "stopped with the daemon"),
                                   (sloth, "cut short by sloth's own trouble (a crash, a lost lease)")) if n]
        notes.append(f"{given} not counted: " + (why[0][1] if len(why) == 1 else
                                                 ", ".join(f"{n} {w}" for n, w in why)))
    return f"{text} ({runs} run{'s' if runs != 1 else ''}; " + "; ".join(notes) + ")"
