"""The full-screen view of `sloth top`, a Textual app: the header, the
panes (lanes, running, next up, the day's failures, schedules), the
selected job's detail (history and a live log tail), the keys (keys.py)
with a confirmation that defaults to No, the filter and the help.

What it shows comes from the Feed (feed.py: the daemon's change stream,
or the queue file read-only), as plain rows made by view.py; this module
only lays them out. Imported by `sloth top` alone (textual is heavy).
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Static
from textual.widgets.data_table import RowDoesNotExist

from sloth_daemon import errors
from sloth_daemon.cli.render import command_text, show_job
from sloth_daemon.cli.top import view
from sloth_daemon.cli.top.feed import LOG_LINES, Detail, Feed, Snapshot
from sloth_daemon.cli.top.signatures import FailureGroup, group
from sloth_daemon.cli.top.keys import ACTIONS, BY_NAME, VIEW_KEYS, Action

NARROW = 110  # columns below which the detail pane goes under the lists
NARROW_LOG_LINES = 6  # the log lines the detail pane has room for under the lists
NOTE_S = 30.0  # a connection's news stays this long on the header
PANES = ("running", "next", "failures", "schedules", "lanes")
COLUMNS = {
    "lanes": ("lane", "slots", "queued", "blocked", ""),
    "running": ("id", "elapsed", "progress", "left", "cpu", "mem", "", "runs under", "command"),
    "next": ("id", "lane", "pri", "why it waits", "command"),
    "failures": ("n", "signature (exit, last line)", "jobs", "last"),
    "schedules": ("schedule", "next", "when", ""),
}
TITLES = {"lanes": "lanes", "running": "running", "next": "next up (run order)",
          "failures": "today's failures by signature", "schedules": "schedules: due in 24 h, blocked"}


class Confirm(ModalScreen[bool]):
    """A yes/no question whose default is No: only ``y`` says yes."""

    BINDINGS = [Binding("y", "yes", "yes"), Binding("n,escape,enter", "no", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question
        self.answered = False  # keys typed ahead reach it until it is gone: the first answer counts

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.question}\n\ny: yes    n, Enter, Esc: no (the default)"), id="question")

    def action_yes(self) -> None:
        self._answer(True)

    def action_no(self) -> None:
        self._answer(False)

    def _answer(self, yes: bool) -> None:
        if not self.answered:
            self.answered = True
            self.dismiss(yes)


class Help(ModalScreen[None]):
    """The keys (`?`); any key closes it."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def compose(self) -> ComposeResult:
        lines = ["sloth top: keys", ""]
        lines += [f"  {k:<6} {what}" for k, what in VIEW_KEYS]
        lines += ["", "on the selected job:"]
        lines += [f"  {_key_label(a):<6} {a.help}{'  (asks first)' if a.destructive else ''}" for a in ACTIONS]
        lines += ["", "any key closes this"]
        yield Static(Text("\n".join(lines)), id="help")

    def on_key(self, event: events.Key) -> None:
        event.stop()
        if not self.closing:  # keys typed ahead reach it until it is gone: the first closes it
            self.closing = True
            self.dismiss(None)


def _key_label(a: Action) -> str:
    return {"plus": "+", "minus": "-"}.get(a.key, a.key)


class TopApp(App[None]):
    TITLE = "sloth top"
    ENABLE_COMMAND_PALETTE = False  # its keys are the view's own (`?` lists them)
    CSS = """
    Screen { layout: vertical; }
    #header { height: 3; padding: 0 1; background: $boost; }
    #body { height: 1fr; layout: horizontal; }
    #lists { width: 3fr; }
    #detail { width: 2fr; border-left: solid $primary; padding: 0 1; }
    Screen.narrow #body { layout: vertical; }
    Screen.narrow #detail { width: 1fr; height: 9; border-left: none; border-top: solid $primary; }
    Screen.narrow #lists { width: 1fr; }
    .title { text-style: bold; height: 1; }
    DataTable { height: auto; max-height: 14; scrollbar-size-horizontal: 0; }
    #message { height: 1; padding: 0 1; }
    #log-narrow { display: none; }
    Screen.narrow #log-narrow { display: block; }
    Screen.narrow #log { display: none; }
    #filter { display: none; }
    #filter.shown { display: block; }
    Confirm, Help { align: center middle; }
    #question, #help { width: auto; max-width: 90%; padding: 1 2; border: heavy $warning; background: $panel; }
    """
    BINDINGS = [
        Binding("q", "quit_top", "quit"), Binding("ctrl+c", "quit_top", "quit", show=False),
        Binding("question_mark", "help", "keys"), Binding("slash", "filter", "filter"),
        *(Binding(a.key, f"act('{a.name}')", a.name, show=a.name in ("cancel", "kill", "retry", "pause"))
          for a in ACTIONS),
    ]

    def __init__(self, *, filter_text: str = "", feed_options: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.snap: Snapshot | None = None
        self.job_filter = view.Filter.parse(filter_text)
        self.chosen: int | None = None
        self.job_detail: Detail | None = None
        self.said = ""
        self.news: tuple[str, float] | None = None
        self.feed = Feed(self._from_feed, **(feed_options or {}))
        self._detail_busy = False
        self.home: Any = None  # the view's screen, once mounted
        self._shown: dict[str, list[tuple[Any, tuple[str, ...]]]] = {}  # each pane's rows as drawn
        self._shown_text: dict[str, str] = {}  # the header's and the message line's text as drawn
        self._grouped: tuple[list[Any], str, list[FailureGroup]] | None = None

    # ------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(Text("sloth top: connecting…"), id="header")
        with Vertical(id="body"):
            with VerticalScroll(id="lists"):
                for pane in PANES:
                    yield Static(Text(TITLES[pane]), classes="title", id=f"title-{pane}")
                    table: DataTable[Any] = DataTable(id=pane, cursor_type="row", zebra_stripes=False)
                    table.add_columns(*COLUMNS[pane])
                    yield table
            with VerticalScroll(id="detail"):
                yield Static(Text(""), id="log-narrow")
                yield Static(Text("select a job (↑ ↓, Tab)"), id="job")
                yield Static(Text(""), id="log")
        yield Input(placeholder="filter: lane:L state:S label:X words", id="filter")
        yield Static(Text(""), id="message")
        yield Footer()

    def on_mount(self) -> None:
        self.home = self.screen  # the view's own screen (a question or the help may be on top of it)
        self._fit(self.size.width)
        self.feed.start()
        self.set_interval(1.0, self._tick)
        self.home.query_one("#running", DataTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        if self.home is not None:
            self._fit(event.size.width)
            self._draw()

    def _fit(self, width: int) -> None:
        """Narrow: the detail under the lists, its live log first (the few
        rows it has go to what moves: CSS shows #log-narrow, not #log); wide:
        beside them, the log last."""
        self.home.set_class(width < NARROW, "narrow")

    # --------------------------------------------------------------- feed
    def _from_feed(self, snap: Snapshot) -> None:
        """From the feed's thread: hand it to the app's."""
        self._hand_over(self.take, snap)

    def _hand_over(self, callback: Any, *args: Any) -> None:
        """From a thread (the feed, a read, a request): ``callback(*args)``
        in the app's. The app may have ended meanwhile (RuntimeError), or be
        taking its view down (a quit while the read ran: NoMatches, raised
        back into the thread; CI saw it end a test's app with WorkerFailed):
        then what the thread brings goes nowhere."""
        try:
            self.call_from_thread(callback, *args)
        except (RuntimeError, NoMatches):
            pass

    def take(self, snap: Snapshot) -> None:
        """A new look at the queue (or, ``source`` "usage", new CPU and memory figures only)."""
        if snap.source == "usage":
            if self.snap is not None:
                self.snap.usage, self.snap.power = snap.usage, snap.power
                self._draw()
            return
        self.snap = snap
        if snap.note:
            self.news = (snap.note, time.monotonic())
        self._draw()
        if self.chosen is not None and self.chosen in snap.changed:
            self._load_detail(self.chosen)

    def _tick(self) -> None:
        """Each second: elapsed times and countdowns move; the log tail of a
        running job is read again (from its file: nothing asked of the daemon)."""
        self._draw()
        d = self.job_detail
        if self.chosen is not None and self._is_running(self.chosen) and d is not None and d.path:
            self.run_worker(lambda: self._read_tail(d), thread=True, group="tail")

    def _read_tail(self, d: Detail) -> None:
        from sloth_daemon.cli.render import tail_lines

        d.tail = tail_lines(d.path or "", LOG_LINES)
        self._hand_over(self._show_log, d)

    def _is_running(self, jid: int) -> bool:
        return self.snap is not None and any(j["id"] == jid for j in self.snap.running)

    # --------------------------------------------------------------- draw
    def _draw(self) -> None:
        snap, now = self.snap, time.time()
        if snap is None or not self.is_running:
            return
        st = snap.status or {}
        lines = view.header_lines(st, snap.source, snap.power, now)
        if snap.source.startswith("no daemon"):
            lines[0] = f"{snap.source}  (`sloth daemon start`, or a key that acts, starts one)"
        if self.news is not None and time.monotonic() - self.news[1] < NOTE_S:
            lines.append(self.news[0])
        elif self.job_filter:
            lines.append(f"filter: {self.job_filter.text()}  (/ to change, empty to clear)")
        self._put("#header", "\n".join(lines))
        lanes = st.get("lanes") or {}
        f = self.job_filter
        keep = f.matches if f else (lambda j: True)
        self._fill("lanes", [(f"l:{n}", r) for n, r in zip(sorted(lanes), view.lane_rows(lanes), strict=True)
                             if f.lane is None or n == f.lane])
        running = [j for j in snap.running if keep(j)]
        self._fill("running", view.running_rows(running, snap.usage, now))
        waiting = [j for j in snap.waiting if keep(j)]
        self._fill("next", view.next_rows(waiting, lanes, bool(st.get("paused_all")), now))
        self._fill("failures", view.failure_rows(self._groups(snap, keep), now))
        known = {**snap.schedule_jobs, **{j["id"]: j for j in (*snap.waiting, *snap.running)}}
        self._fill("schedules", [(f"s:{n}", r) for n, r in view.schedule_rows(snap.schedules, known, now)])
        self._put("#message", self.said)

    def _groups(self, snap: Snapshot, keep: Any) -> list[FailureGroup]:
        """Today's failures the filter keeps, by signature (grouped again only
        when the failures read or the filter changed, not each second)."""
        text = self.job_filter.text()
        g = self._grouped
        if g is None or g[0] is not snap.failures or g[1] != text:  # the same list: not read again
            g = self._grouped = (snap.failures, text, group((j, last) for j, last in snap.failures if keep(j)))
        return g[2]

    def _put(self, selector: str, text: str) -> None:
        """Show ``text`` in a Static, only if it changed (no redraw each second for nothing)."""
        if self._shown_text.get(selector) != text:
            self._shown_text[selector] = text
            self.home.query_one(selector, Static).update(Text(text))

    def _fill(self, pane: str, rows: list[tuple[Any, tuple[str, ...]]]) -> None:
        """Replace a pane's rows, keeping the cursor on the same row key
        (nothing done when they are what it shows: most panes, most seconds)."""
        if self._shown.get(pane) == rows:
            return
        self._shown[pane] = rows
        table = self.home.query_one(f"#{pane}", DataTable)
        current = None
        if table.row_count and table.cursor_row < table.row_count:
            current = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        table.clear()
        for key, cells in rows:
            table.add_row(*(Text(c) for c in cells), key=str(key))
        self.home.query_one(f"#title-{pane}", Static).update(Text(f"{TITLES[pane]} ({len(rows)})"))
        if current is not None:
            try:
                table.move_cursor(row=table.get_row_index(current), animate=False)
            except RowDoesNotExist:  # the row is gone (the job ended, moved pane)
                pass

    # ------------------------------------------------------------- select
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.has_focus:
            self._choose(event.data_table)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, DataTable):
            self._choose(event.widget)

    def _choose(self, table: DataTable[Any]) -> None:
        """The job under the table's cursor now (not the event's row: a
        refill moves the cursor to the top and back before its events are
        handled) becomes the chosen one."""
        if not table.row_count:
            return
        jid = _job_of(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        if jid is not None and jid != self.chosen:
            self.chosen = jid
            self._load_detail(jid)

    def _load_detail(self, jid: int) -> None:
        if self._detail_busy:
            return
        self._detail_busy = True
        self.run_worker(lambda: self._read_detail(jid), thread=True, exclusive=False, group="detail")

    def _read_detail(self, jid: int) -> None:
        try:
            d = self.feed.detail(jid)
        except errors.SlothError as e:
            d = Detail({"job": None, "error": e.message}, [], "")
        self._hand_over(self._show_detail, jid, d)

    def _show_detail(self, jid: int, d: Detail) -> None:
        self._detail_busy = False
        if jid != self.chosen:  # another was chosen meanwhile (its load was not started: one at a time)
            if self.chosen is not None:
                self._load_detail(self.chosen)
            return
        self.job_detail = d
        job = d.info.get("job")
        if job is None:
            self.home.query_one("#job", Static).update(Text(f"job {jid}: {d.info.get('error', 'gone')}"))
            self.home.query_one("#log", Static).update(Text(""))
            self.home.query_one("#log-narrow", Static).update(Text(""))
            return
        info = d.info
        text = show_job(job, info.get("events", []), prereqs=info.get("prereqs", ()),
                        dependents=info.get("dependents", ()))
        extra = view.cost_lines(info) + _progress_lines(job) + _batch_lines(job)
        self.home.query_one("#job", Static).update(Text.from_ansi("\n".join([text, *extra])))
        self._show_log(d)

    def _show_log(self, d: Detail) -> None:
        job = d.info.get("job")
        if job is None or job["id"] != self.chosen:
            return
        head = f"log ({d.where})" + (", live" if job["state"] == "running" else "")
        self.home.query_one("#log", Static).update(Text("\n".join([head, *(f"| {ln}" for ln in d.tail)])))
        narrow = d.tail[-NARROW_LOG_LINES:]  # its newest lines, in the rows it has
        self.home.query_one("#log-narrow", Static).update(Text("\n".join([head, *(f"| {ln}" for ln in narrow)])))

    # ------------------------------------------------------------ actions
    def _selected_job(self) -> dict[str, Any] | None:
        if self.chosen is None or self.job_detail is None or self.job_detail.info.get("job") is None:
            return None
        job = self.job_detail.info["job"]
        return job if job["id"] == self.chosen else None

    def action_act(self, name: str) -> None:
        action = BY_NAME[name]
        job = self._selected_job()
        if job is None:
            self._say("select a job first (↑ ↓, Tab)")
            return
        if not action.applies(job):
            self._say(f"{action.name}: not for a {job['state']} job ({action.help})")
            return
        if not action.destructive:
            self._send(action, job)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._send(action, job)
            else:
                self._say(f"{action.name} job {job['id']}: not done (you said no)")

        self.push_screen(Confirm(action.question(job, command_text(job, 40))), answered)

    def _send(self, action: Action, job: dict[str, Any]) -> None:
        op, args = action.request(job)
        self._say(f"{op} job {job['id']}…")

        def send() -> None:
            from sloth_daemon.cli.connection import call

            try:
                res = call(op, **args)
                said = _outcome(op, job["id"], res)
            except errors.SlothError as e:
                said = f"{op} job {job['id']}: {e.message}"
            self._hand_over(self._said, said)

        self.run_worker(send, thread=True, group="act")

    def _said(self, text: str) -> None:
        self._say(text)
        self.feed.poke()
        if self.chosen is not None:
            self._load_detail(self.chosen)

    def _say(self, text: str) -> None:
        self.said = text
        self._put("#message", text)

    def action_help(self) -> None:
        self.push_screen(Help())

    def action_filter(self) -> None:
        box = self.home.query_one("#filter", Input)
        box.value = self.job_filter.text()
        box.add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.job_filter = view.Filter.parse(event.value)
        event.input.remove_class("shown")
        self.home.query_one("#running", DataTable).focus()
        self._say(f"filter: {self.job_filter.text()}" if self.job_filter else "filter cleared")
        self._draw()

    def action_quit_top(self) -> None:
        self.exit()

    async def on_unmount(self) -> None:
        self.feed.close()


def _job_of(key: Any) -> int | None:
    """The job a row stands for: a job's id, a failure group's newest job."""
    if key is None or key.startswith(("l:", "s:")):
        return None
    return int(key)


def _outcome(op: str, jid: int, res: Any) -> str:
    skipped = (res or {}).get("skipped") if isinstance(res, dict) else None
    if skipped:
        return f"{op} job {jid}: " + "; ".join(str(s[1] if isinstance(s, list) else s.get("why", s))
                                               for s in skipped)
    return f"{op} job {jid}: done"


def _progress_lines(job: dict[str, Any]) -> list[str]:
    bar, left = view.progress_text(job, time.time())
    if not bar:
        return []
    src = (job.get("progress") or {}).get("source", "")
    return [f"  progress  {bar} {left} ({src})".rstrip()]


def _batch_lines(job: dict[str, Any]) -> list[str]:
    b = job.get("batch")
    if not isinstance(b, dict):
        return []
    return [f"  batch     {b.get('id')}" + (f" ({b['name']})" if b.get("name") else "")]


def run(filter_text: str = "") -> int:
    TopApp(filter_text=filter_text).run()
    return 0
