"""Every ``sloth`` command, declared once: its name, help, argument and
options, the function that does it, and whether the fast path may run it.

Both readers of the command line are made from this: the Typer app
(full.py builds each command's signature from it) and the fast path
(fast.py reads its option tables from it, fast_complete.py its completers).
To put a command on the fast path, set ``fast=True`` on it: its function
must then run without Typer (print with edge.echo, return the exit code,
raise SlothError), as add_run.add, look_run.ls/show, look.logs/status,
act.py's and lanes.py's do: every command a person types daily. An
option with ``fast=False`` is left to Typer (the fast path refuses a line
that has it). A command that needs the daemon gets it started by
base.connect when none runs, whichever path read its line.

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
# The completers of complete.py.
IDS, LANES, STATES = "job_ids", "lanes", "states"
DEFAULT_ROWS = 40  # `sloth ls` without --limit (look_run.py)


class Option:
    """One option: the parameter it fills (``dest``), its names ("--lane -l"),
    kind, default, help, completer (a name in complete.py), whether the fast
    path may take it, and whether `--help` hides it."""

    __slots__ = ("dest", "names", "kind", "default", "help", "complete", "fast", "hidden")

    def __init__(self, dest: str, names: str, kind: str = VALUE, default: Any = None, help: Optional[str] = None,
                 *, complete: Optional[str] = None, fast: bool = True, hidden: bool = False) -> None:
        self.dest, self.names, self.kind, self.default, self.help = dest, names.split(), kind, default, help
        self.complete, self.fast, self.hidden = complete, fast, hidden


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
        import importlib

        module, _, name = self.run.partition(":")
        return getattr(importlib.import_module(module), name)


class Group:
    """A word that groups commands (`sloth lane ...`): its help."""

    __slots__ = ("name", "help")

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help


def _json(help: Optional[str] = None) -> Option:
    return Option("as_json", "--json", FLAG, False, help)


_MACHINE = "Machine-readable output."
_PLATFORM = Option("platform", "--platform", VALUE, None, "Service flavour: linux (systemd) or macos (launchd); "
                   "default: this machine.", hidden=True)
_IDS_ANY = Argument("ids", many=True, required=False, metavar="[ID]...", complete=IDS)


def _ids(dest: str = "ids") -> Argument:
    return Argument(dest, many=True, metavar="ID...", complete=IDS)


def _PAUSE_JOBS(verb: str) -> tuple[Option, ...]:
    return (Option("job", "--job", FLAG, False, f"The arguments are running jobs' ids: {verb} their process "
                   "trees (SIGSTOP to every process; resume: SIGCONT)."),
            Option("jobs", "--jobs", FLAG, False, f"Also {verb} the running jobs of the lane (or of all lanes)."))


# In the order `sloth --help` lists them (and `sloth lane --help` its own).
COMMANDS: tuple[Command, ...] = (
    Command(
        "add", "Queue a command: `sloth add -- rsync -a ~/photos /backup`. Prints the job id.",
        "sloth_daemon.cli.add_run:add",
        Option("lane", "--lane -l", VALUE, "default", "Lane (each has its own concurrency).", complete=LANES),
        Option("priority", "--priority -p", INT, 0, "Higher runs first within a lane."),
        Option("max_attempts", "--max-attempts", INT, None, "Tries before failed (default from config)."),
        Option("lease", "--lease", VALUE, None, "Lease length, e.g. 1m (default from config)."),
        Option("timeout", "--timeout -t", VALUE, None, "Kill the job's process tree after this, e.g. 2h."),
        Option("delay", "--delay", VALUE, None, "Do not start before this long from now, e.g. 10m."),
        Option("at", "--at", VALUE, None, "Do not start before this time (HH:MM or ISO)."),
        Option("key", "--key -k", VALUE, None, "Idempotency key: if an unfinished job has it, reuse that job."),
        Option("label", "--label", VALUE, None, "A short name shown in listings."),
        Option("cwd", "--cwd", PATH, None, "Working directory (default: the current one)."),
        Option("shell", "--shell -s", FLAG, False, "Run the command through /bin/sh -c."),
        Option("stdin", "--stdin", FLAG, False, "Read many commands, one shell line each, from stdin."),
        Option("from_file", "--file -f", PATH, None, "Like --stdin but from a file."),
        Option("after", "--after", LIST, None, "Run once these jobs are done (ids, e.g. 12,13; at most 1000); "
               "cancelled if one fails.", complete=IDS),
        Option("after_any", "--after-any", LIST, None, "Run once these jobs have ended, whatever the result "
               "(at most 1000).", complete=IDS),
        Option("chain", "--chain", FLAG, False, "--stdin/--file: each line after the one before succeeds."),
        Option("chain_any", "--chain-any", FLAG, False, "--stdin/--file: each line after the one before ends."),
        Option("retry_exit", "--retry-exit", VALUE, None, "Retry only these exit codes, e.g. 1,75."),
        Option("no_retry_exit", "--no-retry-exit", VALUE, None, "Never retry these exit codes (default 126,127; "
               "none to retry all)."),
        Option("anywhere", "--anywhere", FLAG, False, "A shared queue: run on any machine (default: this one)."),
        Option("on", "--on", VALUE, None, "A shared queue: run only on this host (or tag)."),
        Option("hold", "--hold", FLAG, False, "Queue it held: it starts only after `sloth release ID`."),
        Option("keep_awake", "--keep-awake", FLAG, False, "Keep the machine from sleeping while it runs (a lid "
               "close still suspends)."),
        Option("mem", "--mem", VALUE, None, "Memory limit, e.g. 2G (a cgroup where delegated, else per process)."),
        Option("cpus", "--cpus", VALUE, None, "CPU limit in cores, e.g. 1.5 (needs a delegated cgroup v2)."),
        Option("nice", "--nice", INT, None, "Run at this niceness (0 to 19; lower needs root)."),
        Option("io", "--io", VALUE, None, "I/O class: idle, best-effort or best-effort:0..7 (Linux)."),
        Option("when", "--when", LIST, None, "Start only while this holds (repeatable; all must): ac, battery>=40, "
               "idle=10m, online, unmetered, disk>=5G, load<2."),
        Option("on_lost", "--on-lost", VALUE, None, "A --when condition lost while it runs: continue (default), "
               "pause (freeze it until it holds again) or stop (end it, requeue it without spending a try)."),
        Option("needs", "--needs", LIST, None, "Named resources it takes while it runs, e.g. gpu=1 (repeatable; "
               "[resources] in config, gpu from nvidia-smi)."),
        Option("slots", "--slots", INT, None, "Count as N jobs against its lane's concurrency."),
        Option("wait", "--wait -w", FLAG, False, "Block until the job ends; exit with its outcome."),
        Option("no_start", "--no-start", FLAG, False, "Do not start the daemon if it is not running."),
        _json("Print the ids as JSON: {\"ids\": [...]}."),
        arg=Argument("command", many=True, required=False, help="The command and its arguments (after --)."),
        fast=True, interspersed=False),
    Command(
        "ls", "List jobs: running first, then queued in the order they will run, then\nblocked, then the most "
        "recently finished; a summary of counts, and how\nmany rows were left out.",
        "sloth_daemon.cli.look_run:ls",
        Option("state", "--state -s", LIST, None, "Only these states (repeatable; held: `sloth hold`).",
               complete=STATES),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("all_", "--all -a", FLAG, False, "Every job, all finished ones too, no row limit."),
        Option("limit", "--limit -n", INT, None, f"At most this many rows (default {DEFAULT_ROWS}; with --json, all)."),
        Option("offset", "--offset", INT, 0, "Skip this many rows first (to page)."),
        Option("watch", "--watch -w", FLAG, False, "Redraw every --interval until Ctrl-C.", fast=False),
        Option("interval", "--interval", VALUE, "2s", "How often --watch redraws.", fast=False),
        _json("{jobs, total, counts, left_out, ...}: never cut silently."),
        Option("host", "--host", VALUE, None, "A shared queue: only jobs that run, ran or are placed on this host."),
        fast=True),
    Command(
        "show", "Show jobs and their history (claimed, started, failed, reclaimed, ...);\na failed job's last log "
        "lines end it.", "sloth_daemon.cli.look_run:show",
        _json('{"jobs": [job with events, prereqs, dependents]}.'),
        arg=_ids("job_ids"), fast=True),
    Command(
        "logs", "Print a job's output (one log file per attempt, size-capped).", "sloth_daemon.cli.look:logs",
        Option("attempt", "--attempt -a", INT, None, "Which attempt (default: the latest)."),
        Option("follow", "--follow -f", FLAG, False, "Follow live, through retries, until the job ends; exit 0 if "
               "it is done, 5 if not."),
        Option("tail", "--tail -n", INT, None, "Only the last N lines."),
        Option("path_only", "--path", FLAG, False, "Print the log file's path instead."),
        arg=Argument("job_id", many=False, metavar="ID", complete=IDS), fast=True),
    Command(
        "status", "What is going on: the daemon, jobs by state, lanes, what runs now and the last failures.",
        "sloth_daemon.cli.look:status", _json(_MACHINE), fast=True),
    Command(
        "wait", "Block until the jobs end, telling each outcome; exit 0 if all are done,\n5 if any failed or was "
        "cancelled (130 on Ctrl-C; the jobs carry on). No ID: the latest job.", "sloth_daemon.cli.watch:wait",
        _json('{"jobs": [...]} as they ended.'),
        arg=Argument("job_ids", many=True, required=False, metavar="[ID]...", complete=IDS), fast=True),
    Command(
        "cancel", "Cancel jobs: running ones have their process tree ended; jobs that\nwaited for them to be done "
        "are cancelled too.", "sloth_daemon.cli.act:cancel",
        Option("lane", "--lane -l", VALUE, None, "Every active job of this lane.", complete=LANES),
        Option("state", "--state -s", LIST, None, "Only jobs in this state (blocked, queued, running; repeatable).",
               complete=STATES),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "retry", "Put failed or cancelled jobs back in the queue with a fresh attempt budget.",
        "sloth_daemon.cli.act:retry",
        Option("failed", "--failed", FLAG, False, "Every failed job (of --lane, if given)."),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        _json(), arg=_IDS_ANY, fast=True),
    Command(
        "restart", "Queue finished jobs again as new jobs with the same command, lane,\nfolder, environment and "
        "limits (prints the new ids).", "sloth_daemon.cli.act:restart", _json(), arg=_ids(), fast=True),
    Command(
        "kill", "Stop running jobs now: end their process trees (SIGTERM, then SIGKILL\nafter the grace) and mark "
        "them cancelled, not retried.", "sloth_daemon.cli.act:kill",
        Option("now", "--now", FLAG, False, "SIGKILL at once, no grace period."), _json(), arg=_ids(), fast=True),
    # The queue edits (issue 22; cli/edit.py, daemon/edit_ops.py).
    Command(
        "edit", "Change a job that has not started (queued, blocked or held): its command\n(in $VISUAL/$EDITOR, as "
        "`git commit` does, unless --command or -- CMD ARGS), lane,\npriority, label, start time or prerequisites. "
        "One transaction; the job's history\nsays what changed. A running or finished job is refused (`sloth "
        "restart`\nmakes a new job).", "sloth_daemon.cli.edit:edit",
        Option("command", "--command", VALUE, None, "The new command, one shell line (as a line of `add --stdin`)."),
        Option("lane", "--lane -l", VALUE, None, "Move it to this lane.", complete=LANES),
        Option("priority", "--priority -p", INT, None, "Its new priority (higher runs first within a lane)."),
        Option("label", "--label", VALUE, None, "Its new label (\"\" removes it)."),
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
        "stops counting.", "sloth_daemon.cli.pausing:pause",
        _json(), *_PAUSE_JOBS("pause"),
        arg=Argument("lane", many=True, required=False, metavar="[LANE | --job ID...]",
                     help="Lane to pause (default: everything); with --job, the jobs' ids.", complete=LANES),
                     fast=True),
    Command(
        "resume", "Start jobs again after `sloth pause` (--job ID...: continue paused jobs).",
        "sloth_daemon.cli.pausing:resume",
        _json(), *_PAUSE_JOBS("resume"),
        arg=Argument("lane", many=True, required=False, metavar="[LANE | --job ID...]",
                     help="Lane to resume (default: everything); with --job, the jobs' ids.", complete=LANES),
                     fast=True),
    Command(
        "prune", "Delete finished jobs (and their logs); `--older-than 0` for all of them.",
        "sloth_daemon.cli.act:prune",
        Option("older_than", "--older-than", VALUE, "7d", "Only jobs that ended longer ago than this."),
        Option("state", "--state -s", LIST, None, "Only done, failed or cancelled ones (repeatable).",
               complete=STATES),
        Option("lane", "--lane -l", VALUE, None, "Only this lane.", complete=LANES),
        Option("dry_run", "--dry-run", FLAG, False, "Say how many, delete nothing."),
        _json(), fast=True),
    Command(
        "lane ls", "Every lane: concurrency (and where it comes from), running, queued, blocked, paused.",
        "sloth_daemon.cli.lanes:lane_ls", _json(), fast=True),
    Command(
        "lane set", "Set a lane's concurrency now: no restart, running jobs untouched; kept across restarts.",
        "sloth_daemon.cli.lanes:lane_set",
        Option("concurrency", "--concurrency -c", INT, REQUIRED, "Jobs at once; 0 pauses the lane."),
        Option("create", "--create", FLAG, False, "Make the lane if it does not exist yet."),
        _json(), arg=Argument("name", many=False, metavar="LANE", complete=LANES),
                     fast=True),
    Command(
        "lane rm", "Forget a lane that has no blocked, queued or running jobs (say, a typo).",
        "sloth_daemon.cli.lanes:lane_rm", arg=Argument("name", many=False, metavar="LANE", complete=LANES),
                     fast=True),
    Command(
        "config", "Show the settings in force and where each comes from (the daemon's,\nor the file's when none "
        "runs), lanes as `sloth lane set` left them.", "sloth_daemon.cli.admin:config",
        _json(), Option("example", "--example", FLAG, False, "Print an example config file.")),
    Command(
        "daemon run", "Run the daemon in the foreground (what the login service runs).",
        "sloth_daemon.cli.launcher:run_foreground", fast=True),
    Command(
        "daemon start", "Start the daemon in the background if it is not running.",
        "sloth_daemon.cli.admin:daemon_start", _json()),
    Command(
        "daemon stop", "Stop the daemon: running jobs are interrupted and requeued, not failed\n(with --keep-jobs "
        "they carry on, and the next daemon takes them over).", "sloth_daemon.cli.admin:daemon_stop",
        Option("keep_jobs", "--keep-jobs", FLAG, False, "Leave running jobs running for the next daemon."),
        Option("timeout", "--timeout", VALUE, "60s", "How long to wait for running jobs to be interrupted.")),
    Command(
        "daemon restart", "Restart the daemon (e.g. after an upgrade) without touching running\njobs: they keep "
        "running, and the new daemon takes them over.", "sloth_daemon.cli.admin:daemon_restart",
        Option("timeout", "--timeout", VALUE, "60s", "How long to wait for the old daemon to exit.")),
    Command(
        "daemon reload", "Re-read config.toml now (as SIGHUP does): no restart, running jobs untouched.",
        "sloth_daemon.cli.admin:daemon_reload", _json()),
    Command(
        "daemon status", "Show pid, uptime, version, paths, jobs by state and the last sleep/resume seen.",
        "sloth_daemon.cli.admin:daemon_status", _json()),
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
        "service status", "Installed? enabled? running? Does its sloth binary still exist? Linger?",
        "sloth_daemon.cli.service:status", _json(_MACHINE), _PLATFORM),
    Command(
        "doctor", "Check the things that go wrong in practice and say how to fix each.",
        "sloth_daemon.cli.service:doctor", _json(_MACHINE), _PLATFORM),
)
# The words that group commands, in the order `sloth --help` lists them (after the commands).
GROUPS: tuple[Group, ...] = (
    Group("daemon", "Run, start, stop or inspect the background daemon."),
    Group("lane", "List lanes and change how many jobs each runs at once."),
    Group("db", "The queue's database: schema, migrations, identity, hosts."),
    Group("service", "Start the daemon at login: a systemd --user unit or a launchd LaunchAgent."),
)


def find(words: list[str]) -> Optional[Command]:
    """The command ``words`` start with (`lane set ...`, `add ...`), or None."""
    for cmd in COMMANDS:
        if tuple(words[:len(cmd.path)]) == cmd.path:
            return cmd
    return None
