"""Lanes: how many jobs of each lane may run at once, and which are paused.

A lane's concurrency comes from config.toml ([lanes], else
``default_concurrency``) unless `sloth lane set` gave it one: that is kept
in the queue's lanes table with the config's value at that moment, so the
latest intent wins across restarts and reloads (an edit of config.toml for
that lane made after the `lane set` takes over again). Pauses are kept in
the queue's meta table, so they survive a restart too (pueue #452: a pause
that a restart quietly undoes surprises people).

The ``default`` lane always exists. Another exists once config names it, a job was added to it or `lane set
--create` made it; naming any other lane is an error that lists the real
ones (a typo must not pause nothing and say "paused"). A lane that only a
job's ``--lane`` made, and that has no setting of its own (config, `lane
set`, a pause), is listed (`status`, `lane ls`) only while it has jobs
that have not ended: made implicitly, it goes when it is empty, so such
lanes do not pile up; named, it is still known (`ls --lane` finds its
finished jobs). A lane `lane set` made or set stays (its row keeps the
config's value then, ``config_was``).
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Iterable, Mapping

from sloth_daemon.checks import MAX_CONCURRENCY
from sloth_daemon.config import Settings
from sloth_daemon.errors import BadRequest, IllegalTransition, LaneNotFound
from sloth_daemon.queue import Queue
from sloth_daemon.text import shell_command

SET_BY_USER = "sloth lane set"


def overrides_in_force(rows: Mapping[str, Mapping[str, Any]], settings: Settings) -> tuple[dict[str, int], list[str]]:
    """(lane -> concurrency set by `sloth lane set` that still holds, lanes
    whose override the config has changed since and so no longer holds)."""
    held, stale = {}, []
    for name, row in rows.items():
        n = row.get("concurrency")
        if n is None:
            continue
        if row.get("config_was") is not None and row["config_was"] != settings.concurrency(name):
            stale.append(name)
        else:
            held[name] = int(n)
    return held, stale


class Lanes:
    def __init__(self, queue: Queue, settings: Settings, *, host: str | None = None, read_only: bool = False) -> None:
        """``host``: on a queue shared by several machines, this machine's
        name: its pauses are its own (each machine's daemon has its own slots).
        ``read_only``: the lanes as a daemon would see them, read without
        changing anything (a stale override is left in the queue, not in force)."""
        self.queue, self.settings = queue, settings
        self.keys = ("paused_all", "paused_lanes") if host is None else (f"paused_all@{host}", f"paused_lanes@{host}")
        self.paused_all = bool(queue.get_meta(self.keys[0], False))
        self.paused: set[str] = set(queue.get_meta(self.keys[1], []))
        self.overrides: dict[str, int] = {}
        self.held_back: dict[str, str] = {}  # lane -> why its `when` does not hold now (gates.py)
        # Lanes `sloth lane set` made or set (their row has the config's value then): kept, empty or not.
        self.made = {n for n, r in queue.lane_rows().items() if r.get("config_was") is not None}
        if read_only:
            self.overrides = overrides_in_force(queue.lane_rows(), settings)[0]
        else:
            self._load()

    def _load(self) -> list[str]:
        """Read the overrides that hold; forget the stale ones. Returns what it said about them."""
        held, stale = overrides_in_force(self.queue.lane_rows(), self.settings)
        notes = []
        for name in stale:
            old = self.queue.lane_rows()[name]["concurrency"]
            self.queue.set_lane(name, None)
            notes.append(f"lane {name}: config.toml now says {self.settings.concurrency(name)}"
                         f" (replaces {old} from `{SET_BY_USER}`)")
        self.overrides = held
        return notes

    def reload(self, settings: Settings) -> list[str]:
        """New settings (a config reload): lanes follow them at once."""
        self.settings = settings
        return self._load()

    # --------------------------------------------------------------- reads
    def concurrency(self, lane: str) -> int:
        return self.overrides.get(lane, self.settings.concurrency(lane))

    def source(self, lane: str) -> str:
        if lane in self.overrides:
            return SET_BY_USER
        return "config" if lane in self.settings.lanes and self.settings.source(f"lanes.{lane}") != "default" \
            else "default"

    def is_paused(self, lane: str) -> bool:
        return self.paused_all or lane in self.paused

    def why(self, lane: str) -> str | None:
        """Why the queued jobs of ``lane`` do not start, whatever each job
        asks: paused, or its `when` does not hold (None: nothing of the lane)."""
        return paused_why(lane, self.paused_all, self.paused) or (
            f"lane {lane}: {self.held_back[lane]}" if lane in self.held_back else None)

    def explain(self, jobs: Iterable[dict[str, Any]]) -> None:
        """Say in each queued job's ``wait_reason`` why its lane holds it
        back (before the job's own reason: the lane is the first obstacle).
        What ls, show and --json show, from the daemon or read from the file."""
        if self.paused_all or self.paused or self.held_back:
            explain(jobs, self.why)

    def known(self) -> list[str]:
        """Every lane that exists (see the module docstring); ``default`` always does."""
        return sorted({"default"} | set(self.settings.lanes) | set(self.queue.lane_rows()) | self.paused)

    def has_settings(self, lane: str) -> bool:
        """``default``, or a lane config names, `lane set` made or set, or a pause holds."""
        return lane == "default" or lane in self.settings.lanes or lane in self.made or lane in self.paused

    def check(self, lane: str) -> None:
        """Raises LaneNotFound (naming the lanes there are) for a lane that does not exist."""
        known = self.known()
        if lane not in known:
            raise LaneNotFound(lane, known)

    def blocked(self, running: dict[str, int]) -> set[str]:
        """Lanes not to claim from: paused, or every slot in use
        (``running``: lane -> runs in it)."""
        return set(self.paused) | {ln for ln, n in running.items() if n >= self.concurrency(ln)}

    def status(self, running: dict[str, int], counts: Mapping[str, Mapping[str, int]] | None = None,
               known: Iterable[str] = ()) -> dict[str, dict[str, object]]:
        """lane -> concurrency (and its source), running, queued, blocked, paused."""
        return lane_table(self, set(self.known()) | set(known) | set(running), running, counts or {})


    # -------------------------------------------------------------- changes
    def pause(self, lane: str | None) -> None:
        if lane is None:
            self.paused_all = True
            self.queue.set_meta(self.keys[0], True)
        else:
            self.check(lane)
            self.paused.add(lane)
            self.queue.set_meta(self.keys[1], sorted(self.paused))

    def resume(self, lane: str | None) -> None:
        """Resume everything, or one lane. Resuming one lane while all are
        paused is refused: it would say "resumed" while nothing runs."""
        if lane is not None and self.paused_all:
            raise IllegalTransition(
                f"all lanes are paused, so lane {lane!r} cannot run on its own",
                hint="Resume all with `sloth resume`, then pause the lanes to hold back: `sloth pause LANE`.")
        if lane is None:
            self.paused_all = False
            self.paused.clear()
            self.queue.set_meta(self.keys[0], False)
        else:
            self.check(lane)
            self.paused.discard(lane)
        self.queue.set_meta(self.keys[1], sorted(self.paused))

    def set(self, lane: str, concurrency: int, *, create: bool = False) -> dict[str, Any]:
        """`sloth lane set`: 0 pauses the lane (its concurrency is kept for
        later); N > 0 gives it N slots and resumes it if it was paused.
        Running jobs are never touched. Returns before and after."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 0 <= concurrency <= MAX_CONCURRENCY:
            raise BadRequest(f"concurrency must be a whole number from 0 to {MAX_CONCURRENCY}, got {concurrency!r}")
        if create:
            self.queue.set_lane(lane, self.overrides.get(lane), self.settings.concurrency(lane))
            self.made.add(lane)
        self.check(lane)
        was = {"concurrency": self.concurrency(lane), "paused": self.is_paused(lane)}
        if concurrency == 0:
            self.pause(lane)
        else:
            self.queue.set_lane(lane, concurrency, self.settings.concurrency(lane))
            self.overrides[lane] = concurrency
            self.made.add(lane)
            if lane in self.paused:
                self.resume(lane)
        return {"lane": lane, "was": was, "concurrency": self.concurrency(lane), "paused": self.is_paused(lane)}

    def remove(self, lane: str, active: int) -> None:
        """`sloth lane rm`: forget a lane that has no active jobs (``active``: how many it has)."""
        self.check(lane)
        if lane in self.settings.lanes:
            raise BadRequest(f"lane {lane!r} is in config.toml", hint="Remove it there, then `sloth daemon reload`.")
        if active:
            raise IllegalTransition(f"lane {lane!r} has {active} blocked, queued or running job(s)",
                                    hint=f"Cancel them first: `{shell_command('sloth', 'cancel', '--lane', lane)}`.")
        self.queue.forget_lane(lane)
        self.overrides.pop(lane, None)
        self.made.discard(lane)
        if lane in self.paused:
            self.resume(lane)


def paused_why(lane: str, paused_all: bool, paused: Collection[str]) -> str | None:
    """``paused`` as why a queued job waits (the whole queue, or its lane)."""
    if paused_all:
        return "paused"
    return f"paused (lane {lane})" if lane in paused else None


def explain(jobs: Iterable[dict[str, Any]], why: Callable[[str], str | None]) -> None:
    """Each queued job's ``wait_reason`` set to ``why(lane)`` where that says something."""
    for job in jobs:
        if job["state"] == "queued" and (said := why(job["lane"])) is not None:
            job["wait_reason"] = said


def lane_table(lanes: Any, names: Iterable[str], running: Mapping[str, int],
               counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, object]]:
    """The rows of `sloth lane ls` (``lanes``: a Lanes, or a ReadLanes): a
    lane without settings of its own only while it has active jobs
    (``counts``: of the lanes that have some; see the module docstring)."""
    return {ln: {"concurrency": lanes.concurrency(ln), "source": lanes.source(ln),
                 "running": running.get(ln, 0), "queued": counts.get(ln, {}).get("queued", 0),
                 "blocked": counts.get(ln, {}).get("blocked", 0), "paused": lanes.is_paused(ln)}
            for ln in sorted(set(names) | set(counts)) if ln in counts or running.get(ln) or lanes.has_settings(ln)}


def ReadLanes(queue: Any, settings: Settings) -> Lanes:  # named as the class it was (cli/offline.py)
    """The lanes as a daemon would see them, read without changing anything
    (for the CLI when no daemon answers; ``queue``: anything with get_meta
    and lane_rows)."""
    return Lanes(queue, settings, read_only=True)
