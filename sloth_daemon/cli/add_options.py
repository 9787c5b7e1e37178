"""The round-2 options of `sloth add`, each in its own small helper so the
command itself changes by a line per option: dependencies (--after,
--after-any, --chain), exit codes not retried, --at/--delay with their
notes, words that slipped out of an option (`--timeout 5 mins`), where a
job may run on a shared queue (--anywhere, --on), and the note about a
lane the add made.

Imported by `sloth add` itself: only the standard library and errors here
(typing only for the type checker).
"""

from __future__ import annotations

import sys

from sloth_daemon import errors
from sloth_daemon.cli.output import echo
from sloth_daemon.text import shell_command, whole_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional, Sequence

DURATION_OPTIONS = ("--timeout", "-t", "--lease", "--delay")


def id_list(values: Optional[Sequence[str]], option: str) -> list[int]:
    """``--after 3,4 --after 7`` -> [3, 4, 7]."""
    out = []
    for v in values or []:
        for part in v.replace(" ", ",").split(","):
            if not part:
                continue
            n = whole_number(part)
            if n is None or n < 1:
                raise errors.BadRequest(f"{option} {v}: {part!r} is not a job id",
                                        hint=f"Give ids from `sloth ls`, e.g. {option} 12,13.")
            out.append(n)
    return out


def dep_fields(after: Optional[Sequence[str]], after_any: Optional[Sequence[str]]) -> dict[str, Any]:
    a, b = id_list(after, "--after"), id_list(after_any, "--after-any")
    return {k: v for k, v in (("after", a), ("after_any", b)) if v}


def exit_codes(text: Optional[str], option: str) -> Optional[list[int]]:
    """``--retry-exit 1,2`` -> [1, 2]; ``none`` (or "") -> []."""
    if text is None:
        return None
    if text.strip().lower() in ("", "none"):
        return []
    try:
        codes = [int(p) for p in text.replace(" ", ",").split(",") if p]
    except ValueError:
        raise errors.BadRequest(f"{option} {text!r}: give exit codes like 1,2 (or none)") from None
    if any(not 1 <= c <= 255 for c in codes):
        raise errors.BadRequest(f"{option} {text!r}: exit codes run from 1 to 255")
    return codes


def retry_fields(retry_exit: Optional[str], no_retry_exit: Optional[str]) -> dict[str, Any]:
    if retry_exit is not None and no_retry_exit is not None:
        raise errors.BadRequest("--retry-exit and --no-retry-exit cannot be used together",
                                hint="--retry-exit: the only codes retried; --no-retry-exit: codes never retried.")
    out = {"retry_exit": exit_codes(retry_exit, "--retry-exit"),
           "no_retry_exit": exit_codes(no_retry_exit, "--no-retry-exit")}
    return {k: v for k, v in out.items() if v is not None}


def rules_fields(stall: Optional[str] = None, fail_on: Optional[str] = None,
                 retry_on: Optional[Sequence[str]] = None, no_retry_on: Optional[Sequence[str]] = None,
                 backoff: Optional[str] = None) -> dict[str, Any]:
    """--stall 10m, --fail-on REGEX, --retry-on mem,match, --no-retry-on timeout,
    --backoff 5s..10m (or BASE alone): the job's ``rules``, checked as the
    daemon checks them (checks.rules_json, in submit._check_one; docs/watchdogs.md)."""
    from sloth_daemon.cli.values import duration

    rules: dict[str, Any] = {"stall_s": duration(stall, "--stall"), "fail_on": fail_on,
                             "retry_on": _names(retry_on), "no_retry_on": _names(no_retry_on)}
    if backoff is not None:
        base, sep, cap = backoff.partition("..")
        if not base or (sep and not cap):
            raise errors.BadRequest(f"--backoff {backoff!r}: give BASE..CAP, e.g. 5s..10m (or BASE alone)")
        rules["backoff_s"], rules["backoff_cap_s"] = duration(base, "--backoff"), duration(cap or None, "--backoff")
    rules = {k: v for k, v in rules.items() if v is not None}
    return {"rules": rules} if rules else {}  # checked with the job (submit._check_one: named as the option)


def _names(values: Optional[Sequence[str]]) -> Optional[list[str]]:
    """--retry-on mem,match (repeatable, or comma-separated)."""
    return None if values is None else [n.strip() for v in values for n in v.split(",") if n.strip()]


def chain_mode(chain: bool, chain_any: bool) -> Optional[str]:
    if chain and chain_any:
        raise errors.BadRequest("--chain and --chain-any cannot be used together")
    return "after" if chain else "after_any" if chain_any else None


def chain(jobs: list[dict[str, Any]], mode: Optional[str]) -> list[dict[str, Any]]:
    """--chain / --chain-any: each job after the one before it."""
    if mode is not None:
        for j in jobs[1:]:
            j["after_previous"] = mode
    return jobs


def link_batch(batch: list[dict[str, Any]], ids: list[int]) -> list[dict[str, Any]]:
    """A chain that spans requests: the first job of a later batch waits for
    the last id of the one before (after_previous cannot reach across)."""
    first = batch[0] if batch else {}
    mode = first.get("after_previous")
    if mode and ids:
        key = "after" if mode == "after" else "after_any"
        batch[0] = {**{k: v for k, v in first.items() if k != "after_previous"},
                    key: [*first.get(key, []), ids[-1]]}
    return batch


def place_fields(anywhere: bool, on: Optional[str]) -> dict[str, Any]:
    """--anywhere / --on NAME (a host, or a tag a daemon advertises); neither:
    the daemon's default (on a shared queue, the machine that queued it)."""
    if anywhere and on is not None:
        raise errors.BadRequest("--anywhere and --on cannot be used together",
                                hint="--on NAME runs it only there; --anywhere on any machine.")
    if anywhere:
        return {"place": "*"}
    return {} if on is None else {"place": on}


def gate_fields(when: Optional[Sequence[str]], on_lost: Optional[str], needs: Optional[Sequence[str]],
                slots: Optional[int]) -> dict[str, Any]:
    """--when (repeatable), --on-lost, --needs gpu=1 (repeatable, or gpu=1,licence=2), --slots N:
    the job's gate fields (checks.gate_json checks them, here and in the daemon)."""
    out: dict[str, Any] = {}
    if when:
        out["when"] = list(when)
    if on_lost is not None:
        out["on_lost"] = on_lost
    if needs:
        got: dict[str, Any] = {}
        for part in (p for v in needs for p in v.split(",") if p.strip()):
            name, sep, n = (x.strip() for x in part.strip().partition("="))
            if name == "gpu-mem" and n:  # a size: the daemon reads it (checks.needs_map)
                got[name] = n
            elif (count := whole_number(n) if sep else 1) is not None:
                got[name] = got.get(name, 0) + count
            elif _share(n) and name not in got:  # gpu=0.5: a share of one token
                got[name] = float(n)
            else:
                raise errors.BadRequest(f"--needs {part}: give a count or a share below 1, e.g. --needs gpu=1,"
                                        " --needs gpu=0.5, --needs gpu-mem=20G")
        out["needs"] = got
    if slots is not None:
        out["slots"] = slots
    return out


def _share(n: str) -> bool:
    try:
        return 0 < float(n) < 1
    except ValueError:
        return False
def tell_fields(ping: Optional[Sequence[str]] = None, webhook: Optional[Sequence[str]] = None,
                webhook_on: Optional[str] = None, mail_to: Optional[Sequence[str]] = None,
                mail_on: Optional[str] = None) -> dict[str, Any]:
    """--ping, --webhook, --webhook-on, --mail-to, --mail-on: the job's
    channels (checks.tell_json checks them, in the daemon)."""
    out = {"ping": list(ping) if ping else None, "webhook": list(webhook) if webhook else None,
           "webhook_on": webhook_on, "mail_to": list(mail_to) if mail_to else None, "mail_on": mail_on}
    return {k: v for k, v in out.items() if v is not None}


def hold_fields(keep_awake: bool, mem: Optional[str], cpus: Optional[str], nice: Optional[int],
                io: Optional[str]) -> dict[str, Any]:
    """--keep-awake, --mem 2G, --cpus 1.5, --nice 10, --io idle (whether this
    machine can apply them is the daemon's to say, at add)."""
    from sloth_daemon.checks import parse_size

    limits: dict[str, Any] = {}
    if mem is not None:
        limits["mem"] = parse_size(mem, "--mem")
    if cpus is not None:
        try:
            limits["cpus"] = float(cpus)
        except ValueError:
            raise errors.BadRequest(f"--cpus {cpus!r}: give a number of cores, e.g. 1.5") from None
    if nice is not None:
        limits["nice"] = nice
    if io is not None:
        limits["io"] = io
    return {**({"keep_awake": True} if keep_awake else {}), **({"limits": limits} if limits else {})}


def job_fields(*, lane: Optional[str] = None, priority: Optional[int] = None, max_attempts: Optional[int] = None,
               lease: Optional[str] = None, timeout: Optional[str] = None, label: Optional[str] = None,
               retry_exit: Optional[str] = None, no_retry_exit: Optional[str] = None,
               anywhere: Optional[bool] = None, on: Optional[str] = None, keep_awake: Optional[bool] = None,
               mem: Optional[str] = None, cpus: Optional[str] = None, nice: Optional[int] = None,
               io: Optional[str] = None, when: Optional[Sequence[str]] = None, on_lost: Optional[str] = None,
               needs: Optional[Sequence[str]] = None, slots: Optional[int] = None) -> dict[str, Any]:
    """The job fields of the options every job takes (commands._JOB_OPTIONS
    but --cwd and --shell), those given: `sloth add`'s and `sloth edit`'s."""
    from sloth_daemon.cli.values import duration

    out = {"lane": lane, "priority": priority, "max_attempts": max_attempts, "label": label,
           "lease_s": duration(lease, "--lease"), "timeout_s": duration(timeout, "--timeout"),
           **retry_fields(retry_exit, no_retry_exit), **place_fields(bool(anywhere), on),
           **hold_fields(bool(keep_awake), mem, cpus, nice, io), **gate_fields(when, on_lost, needs, slots)}
    return {k: v for k, v in out.items() if v is not None}


def tell_new_lanes(result: dict[str, Any]) -> None:
    for lane in result.get("new_lanes") or []:
        echo(f"sloth: new lane {lane!r} (concurrency from config; "
             f"`{shell_command('sloth', 'lane', 'set', lane, '-c', 'N')}` to change)",
                   err=True)


def not_before(delay: Optional[str], at: Optional[str]) -> Optional[float]:
    """--delay (``10m``, ``+10m``) or --at (see durations.resolve_at); a
    note such as "09:00 has passed today" goes to stderr."""
    import time

    from sloth_daemon.durations import parse_duration, resolve_at

    if delay is not None:
        return time.time() + parse_duration(delay, what="--delay")
    if at is None:
        return None
    t, note = resolve_at(at)
    if note:
        echo(f"sloth: {note}", err=True)
    return t


def stray_words(command: Optional[list[str]], at: Optional[str],
                argv: Sequence[str] = ()) -> tuple[Optional[list[str]], Optional[str]]:
    """Words the shell split off an option value: `--at tomorrow 08:00 -- cmd`
    (joined back into --at), `--timeout 5 mins -- cmd` (an error, not a job
    named `mins`). Returns (command, at).

    Only words before the command can have strayed: add takes no option
    after the command's first word (the command is argv's tail), and a
    command opened by ``--`` is the command, every word of it (`--at 23:00
    -- git log -- README`; `-- m --timeout 5 m`)."""
    from sloth_daemon.durations import is_unit_word

    if not command:
        return command, at
    argv = list(argv or sys.argv[1:])
    start = len(argv) - len(command)
    if start >= 0 and argv[start:] == list(command):
        if start and argv[start - 1] == "--":
            return command, at
        argv = argv[:start + 1]  # the options, and the command's first word
    unit = _number_then(argv, command[0])
    if unit is not None and is_unit_word(command[0]):
        raise errors.BadRequest(f"{unit} {command[0]}: a duration is one word",
                                hint=f"Write {unit}{command[0]} (no space, or quote it); to run a command "
                                     f"named {command[0]}, put it after --.")
    if at is not None and "--" in command[1:]:
        cut = command.index("--")
        if cut > 1 or not _looks_like_clock(command[0]):
            raise errors.BadRequest(f"--at {at} {' '.join(command[:cut])}: the words after --at's value"
                                    " were taken for the command",
                                    hint=f"Quote the time (--at '{at} {command[0]}') and put options before it.")
        return command[cut + 1:], f"{at} {command[0]}"
    if at is not None and _looks_like_clock(command[0]) and at.lower() in _DAY_WORDS:
        return command[1:], f"{at} {command[0]}"
    return command, at


_DAY_WORDS = {"today", "tomorrow", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "monday", "tuesday",
              "wednesday", "thursday", "friday", "saturday", "sunday"}


def _looks_like_clock(word: str) -> bool:
    import re

    return bool(re.fullmatch(r"[0-9]{1,2}(:[0-9]{2}){1,2}|[0-9]{1,2}(:[0-9]{2})?(am|pm)", word.lower()))


def _number_then(argv: list[str], word: str) -> Optional[str]:
    """``--timeout 5`` when argv has a duration option with a bare number
    right before ``word``; else None."""
    for i, arg in enumerate(argv[:-1]):
        if argv[i + 1] != word:
            continue
        opt, _, value = arg.partition("=")
        if value and opt in DURATION_OPTIONS and value.replace(".", "", 1).isdigit():
            return arg
        if i >= 1 and argv[i - 1] in DURATION_OPTIONS and arg.replace(".", "", 1).isdigit():
            return f"{argv[i - 1]} {arg}"
    return None
