"""Every ``sloth`` command, declared once: its name, help, argument and
options, the function that does it, and whether the fast path may run it.

Both readers of the command line are made from this: the Typer app
(typer_app.py builds each command's signature from it) and the fast path
(fast.py reads its option tables from it, fast_complete.py its completers).
To put a command on the fast path, set ``fast=True`` on it: its function
must then run without Typer (print with output.echo, return the exit code,
raise SlothError), as every command a person types daily does (add,
ls, show, logs, status, wait, cancel, ..., lane ls). An option with
``fast=False`` is left to Typer (the fast path refuses a line that has
it). A command that needs the daemon gets it started by
connection.connect when none runs, whichever path read its line.

Imported by every `sloth add`: nothing here but the declarations (no
typer, no typing at run time); a command's function is imported only
when it runs.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Optional

# How an option takes its value, as click reads it: a flag is True when
# given; a value option takes the next word or --opt=value (the last one
# given wins); an int option's value must pass int(); a path option's is
# handed over as a pathlib.Path; a list option collects every one given.
FLAG, VALUE, INT, PATH, LIST = "flag", "value", "int", "path", "list"
REQUIRED = ...  # the default of an option (or argument) that must be given
# The completers of completers.py.
IDS, LANES, STATES = "job_ids", "lanes", "states"
DEFAULT_ROWS = 40  # `sloth ls` without --limit (ls.py)
RECENT_FINISHED = 10  # ... of which at most this many finished jobs


class Option:
    """One option: the parameter it fills (``dest``), its names ("--lane -l"),
    kind, default, help, completer (a name in completers.py), whether the
    fast path may take it, whether `--help` hides it, and, for an option of
    the job a command queues, the job field it sets (``field``: a bad value
    is reported under the option's name, submit.option_names)."""

    __slots__ = ("dest", "names", "kind", "default", "help", "complete", "fast", "hidden", "field")

    def __init__(self, dest: str, names: str, kind: str = VALUE, default: Any = None, help: Optional[str] = None,
                 *, complete: Optional[str] = None, fast: bool = True, hidden: bool = False,
                 field: Optional[str] = None) -> None:
        self.dest, self.names, self.kind, self.default, self.help = dest, names.split(), kind, default, help
        self.complete, self.fast, self.hidden, self.field = complete, fast, hidden, field


class Argument:
    """A command's positional words: one (``many=False``) or any number."""

    __slots__ = ("dest", "many", "required", "metavar", "help", "complete")

    def __init__(self, dest: str, *, many: bool, required: bool = True, metavar: Optional[str] = None,
                 help: Optional[str] = None, complete: Optional[str] = None) -> None:
        self.dest, self.many, self.required, self.metavar = dest, many, required, metavar
        self.help, self.complete = help, complete


class Command:
    """A command: its words (``("lane", "set")``), help, what runs it
    ("module:function", called with every option and the argument by dest),
    its argument (or None) and options."""

    __slots__ = ("path", "help", "run", "arg", "options", "fast", "interspersed")

    def __init__(self, path: str, help: str, run: str, *options: Option, arg: Optional[Argument] = None,
                 fast: bool = False, interspersed: bool = True) -> None:
        self.path, self.help, self.run, self.arg = tuple(path.split()), help, run, arg
        self.options, self.fast, self.interspersed = options, fast, interspersed

    def function(self) -> Callable[..., Optional[int]]:
        """What runs the command (imported now): its exit code, or None for 0."""
        import sys

        module, _, name = self.run.partition(":")
        __import__(module)  # not importlib.import_module: importing importlib (and warnings) costs ~0.5 ms
        return getattr(sys.modules[module], name)


class Group:
    """A word that groups commands (`sloth lane ...`): its help."""

    __slots__ = ("name", "help")

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help


def _json(help: Optional[str] = None) -> Option:
    return Option("as_json", "--json", FLAG, False, help or _MACHINE)


_MACHINE = "Print the answer as JSON (for scripts) instead of text."
_PLATFORM = Option("platform", "--platform", VALUE, None, "Service flavour: linux (systemd) or macos (launchd); "
                   "default: this machine.", hidden=True)
_IDS_ANY = Argument("ids", many=True, required=False, metavar="[ID]...", complete=IDS)
# Help text is wrapped by click; a paragraph that starts with \b keeps its lines (the examples).
# The first sentence of each command's help is its line in `sloth --help` (typer_app.py).


def _ids(dest: str = "ids", *, required: bool = True) -> Argument:
    return Argument(dest, many=True, required=required, metavar="ID..." if required else "[ID]...", complete=IDS)


def _examples(*lines: str) -> str:
    """An "Examples" paragraph of a command's help, each line kept as written."""
    return "\n\n\b\nExamples:\n" + "\n".join(f"  {ln}" for ln in lines)


def _PAUSE_JOBS(verb: str) -> tuple[Option, ...]:
    sent = "SIGSTOP to every process; `sloth resume --job` continues them" if verb == "pause" else \
        "SIGCONT to every process"
    return (Option("job", "--job", FLAG, False, f"The arguments are running jobs' ids: {verb} their process "
                   f"trees ({sent})."),
            Option("jobs", "--jobs", FLAG, False, f"Also {verb} the running jobs of the lane (or of all lanes)."))


# The options of the job a command queues: `sloth add`'s and, the same, a schedule's.
_JOB_LANE = Option("lane", "--lane -l", VALUE, "default", "Lane (each has its own concurrency).", complete=LANES,
                   field="lane")
_JOB_PRIORITY = Option("priority", "--priority -p", INT, 0, "Higher runs first within a lane.", field="priority")
_JOB_MAX_ATTEMPTS = Option("max_attempts", "--max-attempts", INT, None, "Tries before failed (default from config).",
                           field="max_attempts")
_JOB_LEASE = Option("lease", "--lease", VALUE, None, "Lease length, e.g. 1m (default from config).", field="lease_s")
_JOB_TIMEOUT = Option("timeout", "--timeout -t", VALUE, None, "Kill the job's process tree after this, e.g. 2h.",
                      field="timeout_s")
_JOB_LABEL = Option("label", "--label", VALUE, None, "A short name shown in listings.", field="label")
_JOB_CWD = Option("cwd", "--cwd", PATH, None, "Working directory (default: the current one).", field="cwd")
_JOB_SHELL = Option("shell", "--shell -s", FLAG, False, "Run the command through /bin/sh -c.", field="shell")
_JOB_RETRY_EXIT = Option("retry_exit", "--retry-exit", VALUE, None, "Retry only these exit codes, e.g. 1,75.",
                         field="retry_exit")
_JOB_NO_RETRY_EXIT = Option("no_retry_exit", "--no-retry-exit", VALUE, None,
                            "Never retry these exit codes (default 126,127; none to retry all).", field="no_retry_exit")
_JOB_ANYWHERE = Option("anywhere", "--anywhere", FLAG, False, "A shared queue: run on any machine (default: this one).")
_JOB_ON = Option("on", "--on", VALUE, None, "A shared queue: run only on this host (or tag).", field="place")
# What the keeper holds for the run (issue 24): the machine awake, resource limits.
_JOB_HOLDS = (
    Option("keep_awake", "--keep-awake", FLAG, False, "Keep the machine from sleeping while it runs (a lid "
           "close still suspends); refused where nothing can (`sloth doctor` says).", field="keep_awake"),
    Option("mem", "--mem", VALUE, None, "Memory limit, e.g. 2G (a cgroup where delegated, else per process).",
           field="mem"),
    Option("cpus", "--cpus", VALUE, None, "CPU limit in cores, e.g. 1.5 (needs a delegated cgroup v2).", field="cpus"),
    Option("nice", "--nice", INT, None, "Run at this niceness (0 to 19; lower needs root).", field="nice"),
    Option("io", "--io", VALUE, None, "I/O class: idle, best-effort or best-effort:0..7 (Linux).", field="io"),
)
# When it may start and what it takes here (issue 24): conditions, named resources, slots.
_JOB_GATES = (
    Option("when", "--when", LIST, None, "Start only while this holds (repeatable; all must): ac, battery>=40, "
           "idle=10m, online, unmetered, disk>=5G, load<2.", field="when"),
    Option("on_lost", "--on-lost", VALUE, None, "A --when condition lost while it runs: continue (default), "
           "pause (freeze it until it holds again) or stop (end it, requeue it without spending a try).",
           field="on_lost"),
    Option("needs", "--needs", LIST, None, "Named resources it takes while it runs, e.g. gpu=1, gpu=0.5 (a share), "
           "gpu-mem=20G (repeatable; [resources] in config, gpu from nvidia-smi).", field="needs"),
    Option("slots", "--slots", INT, None, "Count as N jobs against its lane's concurrency.", field="slots"),
)
# Who is told of its runs (issue 32, docs/telling.md): pings, webhooks, mail, sent from the outbox.
_JOB_TELL = (
    Option("ping", "--ping", LIST, None, "healthchecks.io-style URL: /start when a run starts, the URL on success, "
           "/<exit code> on failure, ?rid= per run, the log's tail as the body (repeatable).", field="ping"),
    Option("webhook", "--webhook", LIST, None, "POST the job's JSON here on --webhook-on events, signed with "
           "X-Sloth-Signature (HMAC-SHA256, [tell] webhook_secret) (repeatable).", field="webhook"),
    Option("webhook_on", "--webhook-on", VALUE, None, "Events for --webhook, e.g. failed,done (of started, done, "
           "failed, retrying, cancelled, missed; default done,failed,cancelled,missed).", field="webhook_on"),
    Option("mail_to", "--mail-to", LIST, None, "Mail this address a failure's summary and log tail (repeatable).",
           field="mail_to"),
    Option("mail_on", "--mail-on", VALUE, None, "Events for --mail-to (default failed,missed).", field="mail_on"),
)
# Watchdogs and retry rules (issue 33 item 5; docs/watchdogs.md): `sloth add`'s and a schedule's.
_JOB_RULES = (
    Option("stall", "--stall", VALUE, None, "End it (failed, \"stalled\") when it prints nothing this long, "
           "e.g. 10m.", field="stall_s"),
    Option("fail_on", "--fail-on", VALUE, None, "End it (failed, not retried by default) when an output line "
           "matches this regular expression, e.g. 'loss: nan'.", field="fail_on"),
    Option("retry_on", "--retry-on", LIST, None, "Also retry these ends: timeout, stall, match, mem, signal "
           "(default from config: timeout,stall,signal).", field="retry_on"),
    Option("no_retry_on", "--no-retry-on", LIST, None, "Never retry these ends (as --retry-on names them).",
           field="no_retry_on"),
    Option("backoff", "--backoff", VALUE, None, "Wait before a retry: BASE..CAP, doubling from BASE, e.g. "
           "5s..10m (default 2s..backoff_cap_s).", field="backoff_s"),
)
_JOB_OPTIONS = (_JOB_LANE, _JOB_PRIORITY, _JOB_MAX_ATTEMPTS, _JOB_LEASE, _JOB_TIMEOUT, _JOB_LABEL, _JOB_CWD, _JOB_SHELL,
                _JOB_RETRY_EXIT, _JOB_NO_RETRY_EXIT, _JOB_ANYWHERE, _JOB_ON, *_JOB_HOLDS, *_JOB_GATES)


def _unset(o: Option) -> Option:
    """``o`` with no default (an edit changes only what is given)."""
    return Option(o.dest, " ".join(o.names), o.kind, None, o.help, complete=o.complete, fast=o.fast, hidden=o.hidden,
                  field=o.field)


def _schedule_when(edit: bool) -> tuple[Option, ...]:
    return (
        Option("every", "--every", VALUE, None, "Every this long, in wall time (e.g. 1h, 1d; asleep counts)."),
        Option("cron", "--cron", VALUE, None, 'A cron expression, e.g. "0 3 * * *" (or @hourly, @daily, @weekly).'),
        Option("tz", "--tz", VALUE, None, "Time zone of --cron, e.g. Europe/Berlin (default: local time)."),
        Option("missed", "--missed", VALUE, None, "Slots missed asleep or off: once (one catch-up; default), "
               "skip, all (each, at most 100)."),
        Option("overlap", "--overlap", VALUE, None, "Due while the last still runs: skip (default), queue, "
               "parallel, replace."),
        Option("jitter", "--jitter", VALUE, None, "Start each up to this much later, the same offset on a "
               "machine each time (e.g. 10m)."),
        Option("expect_within", "--expect-within", VALUE, None, "Dead-man switch: no occurrence done within this "
               "long (e.g. 26h) tells `missed`, once per window, through its --ping/--webhook/--mail-to and the "
               "desktop, saying why."),
        *(tuple(_unset(o) for o in _JOB_OPTIONS) if edit else _JOB_OPTIONS),
        *(tuple(_unset(o) for o in _JOB_TELL) if edit else _JOB_TELL),
        *(tuple(_unset(o) for o in _JOB_RULES) if edit else _JOB_RULES),
    )


_BATCH_ONLY = Option("batch", "--batch -b", VALUE, None, "Only the jobs of this batch: its id, or a name (the "
                     "newest batch of that name; `sloth add --batch NAME`).")


# In the order `sloth --help` lists them (and `sloth lane --help` its own).
COMMANDS: tuple[Command, ...] = (
    Command(
        "add", "Queue a command and print its job id; the daemon runs it (and starts if need be)." + _examples(
            "sloth add -- rsync -a ~/photos /backup", "sloth add -s 'gzip -9 big.log && mv big.log.gz /srv'",
            "sloth add --at 9pm --label nightly -- make release", "sloth add --file jobs.txt --chain",
            "sloth add -w -- ./flaky-test.sh     # block, exit with its outcome"),
        "sloth_daemon.cli.add:add",
        _JOB_LANE,
        _JOB_PRIORITY,
        _JOB_MAX_ATTEMPTS,
        _JOB_LEASE,
        _JOB_TIMEOUT,
        Option("delay", "--delay", VALUE, None, "Do not start before this long from now, e.g. 10m.",
               field="not_before"),
        Option("at", "--at", VALUE, None, "Do not start before this time: 21:30, 9pm, tomorrow 08:00, mon 9:00, "
               "+10m or ISO (2026-12-01T09:30).", field="not_before"),
        Option("key", "--key -k", VALUE, None, "Idempotency key: if an unfinished job has it, reuse that job "
               "(--on-dup says otherwise).", field="key"),
        Option("on_dup", "--on-dup", VALUE, None, "When an unfinished job has --key: keep it (default), replace it "
               "(cancel it, queue this), append (queue this after it) or fail (exit 6).", field="on_dup"),
        _JOB_LABEL,
        _JOB_CWD,
        Option("shell", "--shell -s", FLAG, False, "Run the command through /bin/sh -c (checked with sh -n first). "
               "Without it, a command that is one word holding a shell line ('ls | wc -l') is refused, and the "
               "script of sh -c or bash -c is checked with that shell's -n.", field="shell"),
        Option("stdin", "--stdin", FLAG, False, "Read many commands, one shell line each (a trailing \\ continues "
               "it), from stdin; every line is checked (sh -n) before any is queued."),
        Option("from_file", "--file -f", PATH, None, "Like --stdin but from a file."),
        Option("batch", "--batch -b", VALUE, None, "Name the batch (--stdin, --file, an array, or one job): "
               "`sloth wait/ls/show/retry/cancel --batch NAME` act on it."),
        Option("each", "--each", LIST, None, "One job per value (blank-separated, as sh splits words): {} in "
               "the command is the value, {#} its index (docs/batches.md).", field="member"),
        Option("each_file", "--each-file", VALUE, None, "One job per line of this file (- : stdin).",
               field="member"),
        Option("range_", "--range", VALUE, None, "One job per number: 1-100, or 0-90:10 (a step).", field="member"),
        Option("grid", "--grid", LIST, None, "One job per combination: 'lr=0.1,0.01 bs=32,64'; {lr} in the "
               "command is its value.", field="member"),
        Option("after", "--after", LIST, None, "Run once these jobs are done (ids, e.g. 12,13; at most 1000); "
               "cancelled if one fails.", complete=IDS, field="after"),
        Option("after_any", "--after-any", LIST, None, "Run once these jobs have ended, whatever the result "
               "(at most 1000).", complete=IDS, field="after_any"),
        Option("chain", "--chain", FLAG, False, "--stdin/--file: each line after the one before succeeds.",
               field="after_previous"),
        Option("chain_any", "--chain-any", FLAG, False, "--stdin/--file: each line after the one before ends.",
               field="after_previous"),
        _JOB_RETRY_EXIT,
        _JOB_NO_RETRY_EXIT,
        _JOB_ANYWHERE,
        _JOB_ON,
        Option("hold", "--hold", FLAG, False, "Queue it held: it starts only after `sloth release ID`.", field="hold"),
        *_JOB_HOLDS,
        *_JOB_GATES,
        *_JOB_TELL,
        *_JOB_RULES,
        Option("wait", "--wait -w", FLAG, False, "Block until the job ends; exit with its outcome."),
        Option("no_start", "--no-start", FLAG, False, "Do not start the daemon if it is not running."),
        _json("Print the ids as JSON: {\"ids\": [...]}."),
        arg=Argument("command", many=True, required=False, help="The command and its arguments (after --)."),
        fast=True, interspersed=False),
    Command(
        "ls", "List jobs: running first, then queued in the order they will run, then blocked, then the most "
        "recently finished. Under the table: counts, what is paused, and how many rows were left out. WAITED: "
        "how long the latest try was due but not running; RAN: how long it ran (or has been running)."
        + _examples("sloth ls", "sloth ls --state failed --since 12h", "sloth ls --since 'yesterday 18:00'",
                    "sloth ls --lane video --watch -n 20", "sloth ls --json | jq '.jobs[].id'"),
        "sloth_daemon.cli.ls:ls",
        Option("state", "--state", LIST, None, "Only these states (repeatable, or queued,held; held: `sloth hold`).",
               complete=STATES),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("all_", "--all -a", FLAG, False, "Every job, all finished ones too, no row limit."),
        Option("limit", "--limit -n", INT, None, f"At most this many rows (default {DEFAULT_ROWS}, with the "
               f"{RECENT_FINISHED} latest finished jobs; with --json, every job)."),
        Option("offset", "--offset", INT, 0, "Skip this many rows first (to page)."),
        Option("since", "--since", VALUE, None, "Only jobs added, started or ended since then: 12h (ago), 18:00, "
               "yesterday 18:00, mon 9:00 or ISO."),
        Option("watch", "--watch", FLAG, False, "Redraw every --interval until Ctrl-C (-n: rows; default: what fits).",
               fast=False),
        Option("interval", "--interval", VALUE, "2s", "How often --watch redraws.", fast=False),
        _json("Print {jobs (with waited_s, ran_s), total, counts, left_out, ...} as JSON: every job unless "
              "--limit (nothing is cut silently)."),
        Option("host", "--host", VALUE, None, "A shared queue: only jobs that run, ran or are placed on this host."),
        Option("columns", "--columns", LIST, None, "Extra columns of the latest attempt: progress, cpu, mem (peak), "
               "wall, ended (or cpu,mem). PROGRESS shows by itself when a running job says how far it is."),
        _BATCH_ONLY,
        fast=True),
    Command(
        "result", "Print the JSON a job's last attempt handed on (written to $SLOTH_RESULT); exit 1 when it "
        "handed on none." + _examples("sloth result 12 | jq .accuracy", "sloth result 12 --attempt 1"),
        "sloth_daemon.cli.result:result",
        Option("attempt", "--attempt", INT, None, "That attempt's result (default: the last attempt's)."),
        arg=Argument("job_id", many=False, metavar="ID", complete=IDS), fast=True),
    Command(
        "show", "Show jobs and their history (claimed, started, failed, reclaimed, ...) in time order; a failed "
        "job's last log lines end it. No ID: the latest job you queued from this machine. ATTEMPTS: the tries "
        "used of those allowed (--max-attempts); a run cut short by a daemon stop or by sloth's own trouble (a "
        "crash, a lost lease) is not counted, and `sloth retry` starts the count again."
        + _examples("sloth show", "sloth show 12 13"),
        "sloth_daemon.cli.show:show",
        _json('Print {"jobs": [job with events, prereqs, dependents, waited_s, ran_s]} as JSON.'),
        Option("batch", "--batch -b", VALUE, None, "A batch instead: its jobs counted by state (an id, or the "
               "newest batch of a name)."),
        arg=_ids("job_ids", required=False), fast=True),
    Command(
        "logs", "Print a job's output (one log file per attempt, size-capped). No ID: that of the latest job you "
        "queued from this machine that has run; notes "
        "(nothing printed, never started) go to stderr." + _examples(
            "sloth logs", "sloth logs 12 -f", "sloth logs 12 --attempt 1 -n 20", "less $(sloth logs 12 --path)"),
        "sloth_daemon.cli.logs:logs",
        Option("attempt", "--attempt -a", INT, None, "Which attempt (default: the latest)."),
        Option("follow", "--follow -f", FLAG, False, "Follow live, through retries, until the job ends; exit 0 if "
               "it is done, 5 if not."),
        Option("tail", "--tail -n", INT, None, "Only the last N lines."),
        Option("path_only", "--path", FLAG, False, "Print the log file's path instead."),
        arg=Argument("job_id", many=False, required=False, metavar="[ID]", complete=IDS), fast=True),
    Command(
        "status", "What is going on: the daemon, jobs by state, lanes, what runs now and the last failures."
        + _examples("sloth status", "sloth status --json | jq .counts"),
        "sloth_daemon.cli.status:status", _json(_MACHINE), fast=True),
    Command(
        "top", "A live full-screen view: lanes, running jobs (progress, CPU, memory), what\nis next and why it waits, "
        "today's failures by signature, schedules due; keys\nto cancel, kill, retry, pause, hold, bump (`?` lists "
        "them). Without a daemon\nit reads the queue file read-only and says so."
        + _examples("sloth top", "sloth top --filter lane:video"),
        "sloth_daemon.cli.top:top",
        Option("filter_text", "--filter", VALUE, None, "Start with this filter: lane:L state:S label:X and words "
               "(`/` changes it)."), fast=False),
    Command(
        "wait", "Block until the jobs end, telling each outcome; exit 0 if all are done,\n5 if any failed or was "
        "cancelled (130 on Ctrl-C; the jobs carry on). No ID: the latest job you queued from this machine.",
        "sloth_daemon.cli.wait:wait",
        _json('{"jobs": [...]} as they ended.'),
        Option("batch", "--batch -b", VALUE, None, "Every job of this batch (an id, or the newest of a name); "
               "one summary line at the end."),
        arg=Argument("job_ids", many=True, required=False, metavar="[ID]...", complete=IDS), fast=True),
    Command(
        "cancel", "Cancel jobs: running ones have their process tree ended; jobs that\nwaited for them to be done "
        "are cancelled too.", "sloth_daemon.cli.cancel:cancel",
        Option("lane", "--lane -l", VALUE, None, "Every active job of this lane.", complete=LANES),
        Option("state", "--state", LIST, None, "Only jobs in these states (blocked, queued, running; repeatable "
               "or comma-separated).",
               complete=STATES),
        Option("batch", "--batch -b", VALUE, None, "Every unfinished job of this batch (an id, or the newest of "
               "a name)."),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "retry", "Put failed or cancelled jobs back in the queue with a fresh attempt budget.",
        "sloth_daemon.cli.retry:retry",
        Option("failed", "--failed", FLAG, False, "Every failed job (of --lane, if given)."),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("batch", "--batch -b", VALUE, None, "The failed jobs of this batch (an id, or the newest of a name)."),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "restart", "Queue finished jobs again as new jobs with the same command, lane,\nfolder, environment and "
        "limits (prints the new ids).", "sloth_daemon.cli.retry:restart", _json(), arg=_ids(), fast=True),
    Command(
        "kill", "Stop running jobs now: end their process trees (SIGTERM, then SIGKILL\nafter the grace) and mark "
        "them cancelled, not retried.", "sloth_daemon.cli.cancel:kill",
        Option("now", "--now", FLAG, False, "SIGKILL at once, no grace period."), _json(), arg=_ids(), fast=True),
    Command(
        "timeline", "The last day on one time axis, one row per lane (or per job): runs as bars, failures "
        "marked, waiting shaded, the machine's sleeps and the daemon's downtime as labelled gaps."
        + _examples("sloth timeline", "sloth timeline --since 8h --jobs", "sloth timeline --html night.html"),
        "sloth_daemon.cli.timeline:timeline",
        Option("since", "--since", VALUE, "24h", "How far back (30m, 8h, 7d; at most 90d)."),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("jobs", "--jobs", FLAG, False, "One row per job instead of per lane."),
        Option("html", "--html", PATH, None, "Write it as one self-contained page (hover, click, zoom) to this file."),
        _json("Print the timeline's data as JSON."), fast=True),
    # The queue edits (issue 22; cli/edit.py, daemon/edit_ops.py).
    Command(
        "edit", "Change a job that has not started (queued, blocked or held): its command\n(in $VISUAL/$EDITOR, as "
        "`git commit` does, unless --command or -- CMD ARGS), start time,\nprerequisites, or any option of `sloth "
        "add` (lane, priority, --timeout, --when,\n--needs, ...; --label \"\", --when none, --needs none remove "
        "one). One transaction;\nthe job's history says what changed. A running or finished job is refused\n(`sloth "
        "restart` makes a new job).", "sloth_daemon.cli.edit:edit",
        Option("command", "--command", VALUE, None, "The new command, one shell line (as a line of `add --stdin`)."),
        *(_unset(o) for o in (*_JOB_OPTIONS, *_JOB_RULES)),  # every option of `sloth add` a job not started takes
        Option("delay", "--delay", VALUE, None, "Start no sooner than this long from now, e.g. 10m (0: now)."),
        Option("at", "--at", VALUE, None, "Start no sooner than this time (9pm, tomorrow 08:00, mon 9:00, ISO)."),
        Option("after", "--after", LIST, None, "Its prerequisites, replacing the old ones (ids; none: no more).",
               complete=IDS),
        Option("after_any", "--after-any", LIST, None, "Prerequisites whatever their result (replacing the old).",
               complete=IDS),
        _json("{job, changes: [\"priority 0 -> 5\", ...], changed}."),
        arg=Argument("words", many=True, metavar="ID [-- CMD ARGS...]", complete=IDS), fast=True),
    Command(
        "bump", "Move waiting jobs to the front of their lane (tsp -u): each gets a priority\none above the "
        "highest of the lane's other queued, held or blocked jobs (kept\nif it is above them already); a delayed "
        "one is made due now. The first\nnamed runs first.", "sloth_daemon.cli.edit:bump",
        _json(), arg=_ids(), fast=True),
    Command(
        "hold", "Keep queued or blocked jobs from starting until `sloth release` (they keep\ntheir place in the "
        "queue).", "sloth_daemon.cli.edit:hold",
        Option("lane", "--lane -l", VALUE, None, "Every queued or blocked job of this lane.", complete=LANES),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "release", "Let held jobs start again: each is queued, or blocked while what it runs\nafter is unfinished.",
        "sloth_daemon.cli.edit:release",
        Option("lane", "--lane -l", VALUE, None, "Every held job of this lane.", complete=LANES),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "pause", "Stop starting new jobs (in one lane, or all). Running jobs carry on,\nunless --jobs (or --job "
        "ID...) stops them too: SIGSTOP to the whole tree; they\nkeep their lease and slot, and their timeout "
        "stops counting.", "sloth_daemon.cli.pause:pause",
        _json(), *_PAUSE_JOBS("pause"),
        arg=Argument("lane", many=True, required=False, metavar="[LANE | --job ID...]",
                     help="Lane to pause (default: everything); with --job, the jobs' ids.", complete=LANES),
                     fast=True),
    Command(
        "resume", "Start jobs again after `sloth pause` (--job ID...: continue paused jobs).",
        "sloth_daemon.cli.pause:resume",
        _json(), *_PAUSE_JOBS("resume"),
        arg=Argument("lane", many=True, required=False, metavar="[LANE | --job ID...]",
                     help="Lane to resume (default: everything); with --job, the jobs' ids.", complete=LANES),
                     fast=True),
    Command(
        "prune", "Delete finished jobs (and their logs); `--older-than 0` for all of them." + _examples(
            "sloth prune --dry-run", "sloth prune --older-than 0 --state done"),
        "sloth_daemon.cli.prune:prune",
        Option("older_than", "--older-than", VALUE, "7d", "Only jobs that ended longer ago than this."),
        Option("state", "--state", LIST, None, "Only done, failed or cancelled ones (repeatable or comma-separated).",
               complete=STATES),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("dry_run", "--dry-run", FLAG, False, "Say how many, delete nothing."),
        _json(), fast=True),
    Command(
        "outbox ls", "Messages not delivered yet (pings, webhooks, mail), and those that failed for good with "
        "their last error; URLs masked.", "sloth_daemon.cli.outbox:outbox_ls",
        Option("all_", "--all -a", FLAG, False, "Also those sent (kept 7 days)."), _json()),
    Command("outbox retry", "Send failed messages again now.", "sloth_daemon.cli.outbox:outbox_retry", _json(),
            arg=_ids()),
    Command("outbox drop", "Forget messages not sent.", "sloth_daemon.cli.outbox:outbox_drop", _json(),
            arg=_ids()),
    Command(
        "lane ls", "Every lane: concurrency (and where it comes from), running, queued, blocked, paused (a lane "
        "only `add --lane` made, while it has jobs).",
        "sloth_daemon.cli.lane:lane_ls", _json(), fast=True),
    Command(
        "lane set", "Set a lane's concurrency now: no restart, running jobs untouched; kept across restarts.",
        "sloth_daemon.cli.lane:lane_set",
        Option("concurrency", "--concurrency -c", INT, REQUIRED, "Jobs at once; 0 pauses the lane."),
        Option("create", "--create", FLAG, False, "Make the lane if it does not exist yet (with -c 0: made "
               "paused)."),
        _json(), arg=Argument("name", many=False, metavar="LANE", complete=LANES), fast=True),
    Command(
        "lane rm", "Forget a lane that has no blocked, queued or running jobs (say, a typo).",
        "sloth_daemon.cli.lane:lane_rm", arg=Argument("name", many=False, metavar="LANE", complete=LANES),
                     fast=True),
    Command(
        "schedule add", "Add a schedule: a named recipe that queues the command as an ordinary job\nat each slot: "
        "`sloth schedule add nightly --cron \"0 3 * * *\" -- backup.sh`.", "sloth_daemon.cli.schedule:add",
        *_schedule_when(False),
        Option("no_start", "--no-start", FLAG, False, "Do not start the daemon if it is not running."), _json(),
        arg=Argument("words", many=True, required=False, metavar="NAME -- CMD...", help="The name, then the command.")),
    Command(
        "schedule ls", "Every schedule: when in words, when its next job is queued, the last run and its outcome, "
        "paused (read from the queue when no daemon runs; none is started).",
        "sloth_daemon.cli.schedule:ls", _json(), fast=True),
    Command(
        "schedule show", "A schedule and its occurrences (each slot's job, or why it has none). Rules: a "
        "sleep through many slots is one catch-up (--missed), a slot due while the last run is active follows "
        "--overlap, a local time DST skips runs at the jump and one it repeats runs once, each slot makes at "
        "most one job (docs/schedules.md).",
        "sloth_daemon.cli.schedule:show", Option("limit", "--limit -n", INT, 20, "At most this many occurrences."),
        _json(), arg=Argument("name", many=False, metavar="NAME"), fast=True),
    Command(
        "schedule pause", "Queue nothing more for a schedule until `schedule resume`.",
        "sloth_daemon.cli.schedule:pause", _json(), arg=Argument("name", many=False, metavar="NAME")),
    Command(
        "schedule resume", "Resume a paused schedule from its next slot (slots it missed paused are not caught up).",
        "sloth_daemon.cli.schedule:resume", _json(), arg=Argument("name", many=False, metavar="NAME")),
    Command(
        "schedule rm", "Remove a schedule (the jobs it queued stay).", "sloth_daemon.cli.schedule:rm",
        _json(), arg=Argument("name", many=False, metavar="NAME")),
    Command(
        "schedule run", "Queue one occurrence now; while it is queued or running, again names that job.",
        "sloth_daemon.cli.schedule:run", _json(), arg=Argument("name", many=False, metavar="NAME")),
    Command(
        "schedule edit", "Change a schedule: only the options given (and the command, after --).",
        "sloth_daemon.cli.schedule:edit", *_schedule_when(True), _json(),
        arg=Argument("words", many=True, required=False, metavar="NAME [-- CMD...]")),
    Command(
        "config", "Show the settings in force and where each comes from (the daemon's, or the file's when none "
        "runs), lanes as `sloth lane set` left them." + _examples(
            "sloth config", "sloth config --example > ~/.config/sloth/config.toml"),
        "sloth_daemon.cli.config:config",
        _json("Print the settings as JSON (durations in seconds)."),
        Option("example", "--example", FLAG, False, "Print an example config file."), fast=True),
    Command(
        "metrics", "Print the queue's metrics as OpenMetrics text: runs by lane and outcome,\ntheir durations, "
        "queue depth, schedules, clock jumps, keeper restarts\n(docs/metrics.md). `metrics_file` in config keeps "
        "them in a file for\nnode_exporter." + _examples("sloth metrics", "sloth metrics --format prometheus"),
        "sloth_daemon.cli.metrics:metrics",
        Option("fmt", "--format", VALUE, "openmetrics", "openmetrics, or prometheus (the text format 0.0.4)."),
        fast=True),
    Command(
        "daemon run", "Run the daemon in the foreground (what the login service runs).",
        "sloth_daemon.cli.daemon:daemon_run", fast=True),
    Command(
        "daemon start", "Start the daemon in the background if it is not running.",
        "sloth_daemon.cli.daemon:daemon_start", _json('Print {"pid", "state"} as JSON.')),
    Command(
        "daemon stop", "Stop the daemon: running jobs are interrupted and requeued, not failed (with --keep-jobs "
        "they carry on, and the next daemon takes them over).", "sloth_daemon.cli.daemon:daemon_stop",
        Option("keep_jobs", "--keep-jobs", FLAG, False, "Leave running jobs running for the next daemon."),
        Option("timeout", "--timeout", VALUE, "60s", "How long to wait for running jobs to be interrupted.")),
    Command(
        "daemon restart", "Restart the daemon without touching running jobs (after an upgrade, say): they keep "
        "running, and the new daemon takes them over.", "sloth_daemon.cli.daemon:daemon_restart",
        Option("timeout", "--timeout", VALUE, "60s", "How long to wait for the old daemon to exit.")),
    Command(
        "daemon reload", "Re-read config.toml now (as SIGHUP does): no restart, running jobs untouched.",
        "sloth_daemon.cli.daemon:daemon_reload", _json('Print {"changed", "notes", "file"} as JSON.')),
    Command(
        "daemon status", "Show pid, uptime, version, the keeper, paths, jobs by state and the last sleep/resume "
        "seen.",
        "sloth_daemon.cli.daemon:daemon_status", _json("Print the daemon's whole status as JSON.")),
    Command(
        "db migrate", "Bring the queue's schema up to this sloth's (each migration in its own\ntransaction, under a "
        "lock: machines that run it together take turns).", "sloth_daemon.cli.db:db_migrate", _json()),
    Command(
        "db status", "Schema version, migrations pending, the queue's identity, hosts seen.",
        "sloth_daemon.cli.db:db_status", _json()),
    Command(
        "service install", "Write the login service for this machine, enable it (and with --now start it).",
        "sloth_daemon.cli.service:install",
        Option("now", "--now", FLAG, False, "Also start it now (default: at the next login)."),
        Option("print_only", "--print", FLAG, False, "Show the file it would write; change nothing."),
        _json(_MACHINE), _PLATFORM),
    Command(
        "service uninstall", "Stop and disable the login service and remove its file.",
        "sloth_daemon.cli.service:uninstall", _json(_MACHINE), _PLATFORM),
    Command(
        "service status", "Whether the login service is installed, enabled and running, whether its sloth "
        "binary still exists, and linger.",
        "sloth_daemon.cli.service:status", _json(_MACHINE), _PLATFORM),
    Command(
        "doctor", "Check the things that go wrong in practice and say how to fix each.",
        "sloth_daemon.cli.doctor:doctor", _json(_MACHINE), _PLATFORM),
)
# The words that group commands, in the order `sloth --help` lists them (after the commands).
GROUPS: tuple[Group, ...] = (
    Group("daemon", "Run, start, stop or inspect the background daemon."),
    Group("lane", "List lanes and change how many jobs each runs at once."),
    Group("outbox", "Pings, webhooks and mail waiting to be delivered, or failed (docs/telling.md)."),
    Group("schedule", "Recurring jobs: catch up once after sleep, never pile up, never fire twice."),
    Group("db", "The queue's database: schema, migrations, identity, hosts."),
    Group("service", "Start the daemon at login: a systemd --user unit or a launchd LaunchAgent."),
)


def find(words: list[str]) -> Optional[Command]:
    """The command ``words`` start with (`lane set ...`, `add ...`), or None."""
    for cmd in COMMANDS:
        if tuple(words[:len(cmd.path)]) == cmd.path:
            return cmd
    return None
