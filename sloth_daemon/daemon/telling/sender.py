"""The sender: delivers the outbox's messages after the commit of the
transitions that wrote them (docs/telling.md).

It leases due messages (contract.Outbox.claim: on a shared queue one
machine takes each), makes each one's request on the loop (messages.py:
the job read from the queue), and sends it on a daemon thread of its own
(at most MAX_THREADS at once; each exchange bounded by ``[tell]
timeout_s``): a receiver that hangs holds a thread, never the event loop,
so heartbeats, claims and the control socket go on. The outcome is
written back on the loop: sent; or due again after a backoff that doubles
from BACKOFF_BASE_S up to BACKOFF_CAP_S, until ``[tell] retry_for_s``
(24 h) has passed since the event: then failed, kept with its last error
for `sloth outbox`. A permanent refusal (a 4xx, a refused recipient) is
failed at once.

A message is marked sent after its receiver answered: a crash between the
two sends it again (at least once); its key lets the receiver drop the
repeat. A stop never waits for a send (its thread dies with the process,
the message unrecorded). A crash or a stop mid-send leaves the message
leased to a dead sender: the machine's next daemon frees its own dead
leases at start (Outbox.free) and sends it again.
Its timer sleeps until the earliest message is due, or a job changes
(``wake``), at most MAX_WAIT_S while any is pending (a sleep of the
machine does not stretch it) and, on a shared queue, ``poll_s``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from sloth_daemon import __version__
from sloth_daemon.backends.contract import Message
from sloth_daemon.config import Settings
from sloth_daemon.daemon.telling.failure import DeliveryError
from sloth_daemon.daemon.waking import woken
from sloth_daemon.errors import JobNotFound, SlothError
from sloth_daemon.models import mask_channel
from sloth_daemon.safefile import open_file, read_file

if TYPE_CHECKING:
    from sloth_daemon.backends.face import Queue

log = logging.getLogger("sloth.tell")
MAX_THREADS = 4
BATCH = 16
BACKOFF_BASE_S = 10.0
BACKOFF_CAP_S = 600.0
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_RETRY_FOR_S = 86400.0
MAX_WAIT_S = 60.0
KEEP_SENT_S = 7 * 86400.0  # sent messages are kept this long (their keys too), then pruned
KEEP_FAILED_S = 30 * 86400.0  # failed ones this long after they failed: time to see them and `outbox retry`
PRUNE_EVERY_S = 3600.0
SECRET_CAP = 4096


def backoff_s(tries: int) -> float:
    """The delay after the ``tries``-th failed delivery: 10 s, 20 s, 40 s ... at most 10 min."""
    return min(BACKOFF_BASE_S * 2 ** max(tries - 1, 0), BACKOFF_CAP_S)


class Sender:
    """Delivers the outbox (see the module docstring). Its own state: the
    settings, its name (``prefix`` + this run), its timer's event
    and counts; ``queue`` is read and written on the loop only;
    ``log_path(job, attempt)``: where a run's log is (its tail is sent)."""

    def __init__(self, queue: Queue, settings: Settings, *, prefix: str,
                 log_path: Callable[[int, int], Path], shared_poll_s: float | None = None) -> None:
        self.queue, self.settings, self.log_path = queue, settings, log_path
        self.prefix = prefix
        self.name = f"{prefix}{os.getpid()}/{os.urandom(4).hex()}"
        self.shared_poll_s = shared_poll_s
        self.stats = {"sent": 0, "retried": 0, "failed": 0}
        self._wake: asyncio.Event | None = None
        self._pruned_at = 0.0
        self._said: str | None = None  # the last delivery error logged (one line per new cause)
        # (subject, channel) -> (id, due) of its earliest message due again: the later ones wait for it
        self._unsent: dict[tuple[Any, ...], tuple[int, float]] = {}

    @property
    def timeout_s(self) -> float:
        return float(self.settings.tell.get("timeout_s", DEFAULT_TIMEOUT_S))

    def wake(self) -> None:
        """Something changed (a job): look for due messages now."""
        if self._wake is not None:
            self._wake.set()

    # ---------------------------------------------------------------- loop
    async def run(self) -> None:
        """Deliver until cancelled (the daemon's stop): claim only as many
        messages as threads are free, so what is claimed is being sent (a
        hung receiver holds its thread until its timeout, never the rest)."""
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        try:
            freed = self.queue.outbox.free(self.prefix)
            if freed:
                log.info("%d message(s) an earlier daemon was sending: sent again (their keys let receivers "
                         "drop a repeat)", freed)
        except SlothError as e:
            log.warning("outbox: %s", e.message)
        busy: dict[Any, asyncio.Task[None]] = {}  # subject (job, schedule) -> its last send
        sending: set[asyncio.Task[None]] = set()  # every send not over
        try:
            await self._deliver(loop, self._wake, busy, sending)
        finally:
            # The daemon stops (or renews): a send still on its thread is not
            # recorded after the queue is closed; its lease runs out and the
            # next daemon sends it again (its key lets the receiver drop it).
            for task in sending:
                task.cancel()

    async def _deliver(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event,
                       busy: dict[Any, asyncio.Task[None]], sending: set[asyncio.Task[None]]) -> None:
        queued: dict[Any, int] = {}  # subject -> its sends not over (each waits for those before it)
        while True:
            wake.clear()
            wait: float | None = None
            try:
                free = MAX_THREADS - len(busy)
                # A message claimed now may wait behind the longest chain of its
                # subject's sends (a job's backlog is claimed batch after batch):
                # its lease covers them too, or it would run out while it waits
                # and the next claim would send it a second time, out of order.
                batch = self.claim(free, ahead=max(queued.values(), default=0)) if free > 0 else []
                for m in batch:
                    subject = (m.job_id, m.schedule)
                    task = loop.create_task(self._send_after(busy.get(subject), loop, m))
                    busy[subject] = task
                    queued[subject] = queued.get(subject, 0) + 1
                    sending.add(task)
                    task.add_done_callback(sending.discard)
                    task.add_done_callback(functools.partial(self._sent, busy, queued, subject))
                if batch:
                    continue
                wait = self._wait_s() if not busy else MAX_WAIT_S
            except SlothError as e:  # the queue is busy or gone a moment: look again soon
                log.warning("outbox: %s", e.message)
                wait = MAX_WAIT_S
            await woken(wake, wait)

    def _sent(self, busy: dict[Any, asyncio.Task[None]], queued: dict[Any, int], subject: Any,
              task: asyncio.Task[None]) -> None:
        if busy.get(subject) is task:
            del busy[subject]
        queued[subject] -= 1
        if not queued[subject]:
            del queued[subject]
        self.wake()  # a thread is free

    async def _send_after(self, before: asyncio.Task[None] | None, loop: asyncio.AbstractEventLoop,
                          m: Message) -> None:
        """Send ``m`` once the send before it of its subject (a job's start before its end) is over."""
        if before is not None:
            await asyncio.wait([before])
        if self._waits(m):
            return
        work = self.prepare(m)
        error = await _on_a_thread(loop, work)
        self.record(m, error)

    def _waits(self, m: Message) -> bool:
        """``m`` waits (due again with it) if an earlier message of its
        subject to the same channel is due again, not sent yet: a start
        that failed once is still told before the end (healthchecks shows a
        start told after the success as a run again, down after its grace)."""
        first, now = self._unsent.get(_line(m)), self.queue.clock.now()
        if first is None or first[0] >= m.id:
            return False
        if first[1] <= now:  # due, and not taken before this one (claims go by due time, then id): dropped
            del self._unsent[_line(m)]  # by hand, or sent by another machine: nothing to wait for
            return False
        due = first[1] - now + 0.001  # just after it
        try:
            self.queue.outbox.failed_try(m.id, m.token or "", f"waits for message {first[0]} before it, not sent "
                                         "yet", due)
        except SlothError as e:  # its lease holds until it runs out: it is tried again then
            log.warning("outbox: cannot record a delivery: %s", e.message)
        return True

    def _wait_s(self) -> float | None:
        now = self.queue.clock.now()
        if now - self._pruned_at > PRUNE_EVERY_S:
            self._pruned_at = now
            self.queue.outbox.prune(KEEP_SENT_S, KEEP_FAILED_S)
            self._unsent = {k: v for k, v in self._unsent.items() if v[1] > now - PRUNE_EVERY_S}  # dropped since
        due = self.queue.outbox.next_at()
        caps = [c for c in (self.shared_poll_s, MAX_WAIT_S if due is not None else None) if c is not None]
        if due is not None:
            caps.append(max(due - now, 0.05))
        return min(caps) if caps else None

    # ---------------------------------------------------------------- steps
    def claim(self, limit: int = BATCH, *, ahead: int = 0) -> list[Message]:
        """Lease up to ``limit`` due messages for as long as each may wait:
        a subject's are sent one after another, each its whole timeout,
        after at most ``ahead`` sends claimed before them."""
        lease = self.timeout_s * (limit + ahead) + 30.0
        return self.queue.outbox.claim(self.name, limit=limit, lease_s=lease)

    def prepare(self, m: Message) -> Work:
        """What to send, read on the loop (the job from the queue)."""
        job = None
        if m.job_id is not None:
            try:
                job = self.queue.get(m.job_id).to_dict()
            except JobNotFound:
                job = None  # pruned since: the message still goes, with what it knows
        path = self.log_path(m.job_id, m.attempt) if m.job_id is not None and m.attempt else None
        return Work(m, job, path, self.settings.tell, self.queue.identity, self.timeout_s)

    def record(self, m: Message, error: DeliveryError | None) -> None:
        """The outcome, written on the loop."""
        shown = f"{m.event} of {m.key} to {_where(m)}"
        line, first = _line(m), self._unsent.get(_line(m))
        if first is not None and first[0] == m.id:
            del self._unsent[line]  # sent, given up, or due again: said below
        try:
            if error is None:
                self.queue.outbox.sent(m.id, m.token or "")
                self.stats["sent"] += 1
                log.debug("sent %s", shown)
                return
            retry_for = float(self.settings.tell.get("retry_for_s", DEFAULT_RETRY_FOR_S))
            now = self.queue.clock.now()
            give_up = error.permanent or now + backoff_s(m.tries) - m.at > retry_for
            self.queue.outbox.failed_try(m.id, m.token or "", str(error), None if give_up else backoff_s(m.tries))
            if not give_up and (first is None or first[0] >= m.id):
                self._unsent[line] = (m.id, now + backoff_s(m.tries))
        except SlothError as e:  # its lease holds until it runs out: it is tried again then
            log.warning("outbox: cannot record a delivery: %s", e.message)
            return
        self.stats["failed" if give_up else "retried"] += 1
        if give_up:
            log.warning("gave up on %s: %s (kept: `sloth outbox`, `sloth outbox retry %d`)", shown, error, m.id)
        elif self._said != str(error):
            self._said = str(error)
            log.warning("cannot deliver %s yet: %s (tried again in %gs)", shown, error, backoff_s(m.tries))

    def pump(self) -> int:
        """Deliver what is due now, on this thread (tests on an injected
        clock); returns how many were tried."""
        batch = self.claim()
        for m in batch:
            if not self._waits(m):
                self.record(m, _deliver(self.prepare(m)))
        return len(batch)

    def status(self) -> dict[str, Any]:
        """What `sloth status` says of the outbox."""
        counts = self.queue.outbox_counts()
        return {"pending": counts["pending"], "failed": counts["failed"], **self.stats}


class Work:
    """One delivery, made on the loop and sent on a thread."""

    def __init__(self, m: Message, job: dict[str, Any] | None, log: Path | None, tell: Any, queue: str,
                 timeout_s: float) -> None:
        self.m, self.job, self.log, self.tell, self.queue, self.timeout_s = m, job, log, tell, queue, timeout_s


async def _on_a_thread(loop: asyncio.AbstractEventLoop, w: Work) -> DeliveryError | None:
    """_deliver(w) on a daemon thread of its own (at most MAX_THREADS run:
    the run loop claims no more); its answer comes back on the loop."""
    fut: asyncio.Future[DeliveryError | None] = loop.create_future()

    def answer(v: DeliveryError | None) -> None:
        if not fut.done():
            fut.set_result(v)

    def work() -> None:
        v = _deliver(w)
        try:
            loop.call_soon_threadsafe(answer, v)
        except RuntimeError:  # the loop is closed: the daemon stopped meanwhile
            pass

    threading.Thread(target=work, name="sloth-tell", daemon=True).start()
    return await fut


def _deliver(w: Work) -> DeliveryError | None:
    """Send one message (on a thread); None when its receiver took it.
    What sends is imported here, once a message goes (failure.py says why)."""
    from sloth_daemon.daemon.telling import mail, messages
    from sloth_daemon.daemon.telling.http import request

    m, kind = w.m, w.m.channel.get("kind")
    try:
        if kind == "ping":
            r = messages.ping(w.queue, m, w.job, _tail(w.log), __version__)
        elif kind == "webhook":
            r = messages.webhook(w.queue, m, w.job, _secret(w.tell), __version__)
        elif kind == "mail":
            msg = messages.mail(w.queue, m, w.job, _tail(w.log), str(w.tell.get("mail_from") or mail.default_sender()))
            mail.send(msg, w.tell, w.timeout_s)
            return None
        else:
            return DeliveryError(f"unknown channel kind {kind!r}", permanent=True)
        request(r.method, r.url, r.body, r.headers, timeout_s=w.timeout_s, ca_file=w.tell.get("ca_file"))
        return None
    except DeliveryError as e:
        return e
    except Exception as e:  # a bug must not kill the sender's loop: said, and retried
        log.exception("delivering %s", m.key)
        return DeliveryError(f"{type(e).__name__} while delivering")


def _tail(path: Path | None) -> bytes:
    """The log's last bytes (messages.TAIL_CAP), or nothing."""
    from sloth_daemon.daemon.telling import messages

    if path is None:
        return b""
    try:  # a regular file only: the job may have put a FIFO in its log's place
        with os.fdopen(open_file(path), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - messages.TAIL_CAP, 0))
            return f.read(messages.TAIL_CAP)
    except OSError:
        return b""


def _secret(tell: Any) -> bytes | None:
    if tell.get("webhook_secret"):
        return str(tell["webhook_secret"]).encode()
    f = tell.get("webhook_secret_file")
    if not f:
        return None
    try:  # a FIFO, a device or a huge file in its place is refused, never waited on
        return read_file(f, SECRET_CAP, follow=True).strip() or None
    except OSError as e:
        raise DeliveryError(f"cannot read webhook_secret_file: {e.strerror}") from None


def _line(m: Message) -> tuple[Any, ...]:
    """What must go in order: a subject's messages to one channel."""
    return m.job_id, m.schedule, json.dumps(m.channel, sort_keys=True)


def _where(m: Message) -> str:
    ch = mask_channel(m.channel)
    return str(ch.get("url") or ", ".join(ch.get("to", [])))

