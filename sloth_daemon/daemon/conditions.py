"""Run conditions (``sloth add --when``, a lane's ``when``): what this
machine is doing now, and whether a job's conditions hold.

What is observed where (docs/conditions.md says what was verified where):

- ``ac``, ``battery>=N``: Linux reads /sys/class/power_supply itself (each
  supply's ``type``, ``online``, ``capacity``, ``status``; a battery whose
  ``scope`` is ``Device`` is a mouse's, not the machine's): on mains while
  a Mains or USB supply is online, or, with none listed, while no battery
  says Discharging. Elsewhere psutil.sensors_battery (macOS: IOKit). No
  battery at all is always "on mains power", and ``battery>=N`` is met on
  mains power.
- ``idle=D``: Linux: logind's IdleHint / IdleSinceHintMonotonic (busctl, or
  gdbus), set by the desktop's idle monitor; macOS: ``ioreg -c IOHIDSystem``
  HIDIdleTime. No logind answering is an error at add, never a pass.
- ``online``, ``unmetered``: NetworkManager's State / Connectivity and
  Metered (busctl, else nmcli). No NetworkManager is an error at add.
- ``disk>=S``: free space (psutil.disk_usage) in the job's folder.
- ``load<N``: the one-minute load average (os.getloadavg).

A look at the machine costs a few milliseconds (a busctl is ~5 ms), so
:class:`Conditions` keeps what it saw for ``max_age_s`` (the daemon's
``conditions_check_s``) and only looks again when asked after that, or
after :meth:`Conditions.forget` (a power event). Nothing here runs on its
own: the worker asks, and only while some job waits on, or runs under, a
condition (daemon/worker/gates.py).
"""

from __future__ import annotations

import os
import re
from sloth_daemon.daemon.which import which as path_which
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from sloth_daemon.checks import size_bytes
from sloth_daemon.durations import format_duration, parse_duration
from sloth_daemon.errors import BadRequest

POWER_SUPPLY = Path("/sys/class/power_supply")
COMMAND_TIMEOUT_S = 2.0
FRESH_S = 5.0  # an add trusts a look this recent to say a condition can be observed
LOGIND = ("org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager")
NM = ("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager", "org.freedesktop.NetworkManager")
NM_CONNECTED_GLOBAL = 70  # NMState
NM_CONNECTIVITY = {0: "unknown", 1: "no network", 2: "a captive portal", 3: "limited", 4: "full"}
NM_METERED = {0: None, 1: True, 2: False, 3: True, 4: False}  # unknown, yes, no, guess-yes, guess-no

RunCommand = Callable[[Sequence[str]], str]  # argv -> its stdout; raises OSError or CalledProcessError


class Unobservable(BadRequest):
    """A condition this machine cannot observe (no logind, no NetworkManager)."""


def run_command(argv: Sequence[str]) -> str:
    """The command's stdout (a short timeout: the daemon waits for it)."""
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=True,
                         stdin=subprocess.DEVNULL)
    return out.stdout


# ------------------------------------------------------------------ power
@dataclass(frozen=True)
class Power:
    on_mains: bool
    percent: float | None  # the machine's battery, None: it has none


def power_from_sysfs(root: Path = POWER_SUPPLY) -> Power:
    """Power as /sys/class/power_supply tells it (see the module docstring)."""
    mains_seen, mains_online, percents, discharging = False, False, [], False
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return Power(True, None)  # no supplies listed: a desktop, a VM, a container
    for name in names:
        kind = _read(root / name / "type")
        if kind in ("Mains", "USB", "USB_C", "USB_PD"):
            mains_seen = True
            mains_online |= _read(root / name / "online") == "1"
        elif kind == "Battery" and _read(root / name / "scope") != "Device":
            cap = _read(root / name / "capacity")
            if cap is not None and cap.isdigit():
                percents.append(float(cap))
            discharging |= (_read(root / name / "status") or "").lower() == "discharging"
    if not percents:
        return Power(True, None)
    on = mains_online if mains_seen else not discharging
    return Power(on, sum(percents) / len(percents))


def power_from_psutil() -> Power:
    import psutil

    bat = psutil.sensors_battery()
    if bat is None:
        return Power(True, None)
    return Power(bat.power_plugged is not False, float(bat.percent))


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


# ------------------------------------------------------------------- idle
def parse_busctl(text: str) -> int | bool | str:
    """``b true`` -> True, ``t 123`` / ``u 4`` -> 123 / 4, ``s "x"`` -> "x"."""
    sig, _, value = text.strip().partition(" ")
    if sig == "b":
        return value == "true"
    if sig in ("t", "u", "i", "x", "q", "n", "y"):
        return int(value)
    if sig == "s":
        return value.strip('"')
    raise ValueError(f"unexpected busctl output {text!r}")


def parse_gdbus(text: str) -> int | bool | str:
    """``(<true>,)`` -> True, ``(<uint64 123>,)`` -> 123, ``(<'x'>,)`` -> "x"."""
    m = re.fullmatch(r"\(<(.*)>,\)", text.strip())
    if m is None:
        raise ValueError(f"unexpected gdbus output {text!r}")
    v = m.group(1)
    if v in ("true", "false"):
        return v == "true"
    num = re.fullmatch(r"(?:u?int\d+|byte) (\d+)|(\d+)", v)
    if num:
        return int(num.group(1) or num.group(2))
    return v.strip("'")


def parse_hid_idle(text: str) -> float:
    """Seconds idle from ``ioreg -c IOHIDSystem`` (HIDIdleTime, in ns)."""
    m = re.search(r'"HIDIdleTime"\s*=\s*(\d+)', text)
    if m is None:
        raise ValueError("no HIDIdleTime in ioreg's output")
    return int(m.group(1)) / 1e9


def parse_nmcli_general(text: str) -> tuple[bool, str]:
    """``nmcli -t -f STATE,CONNECTIVITY general`` (``connected:full``) -> (online, connectivity)."""
    state, _, conn = text.strip().splitlines()[0].partition(":") if text.strip() else ("", "", "")
    return state == "connected" or conn == "full", conn or "unknown"


def parse_nmcli_metered(text: str) -> bool | None:
    """``nmcli -t -f GENERAL.METERED device show``'s first device: yes/no, maybe "(guessed)"."""
    for line in text.splitlines():
        _, _, v = line.partition(":")
        v = v.strip().lower()
        if v.startswith("yes"):
            return True
        if v.startswith("no"):
            return False
    return None


class Bus:
    """Properties on the system bus, through busctl (else gdbus)."""

    def __init__(self, run: RunCommand = run_command, which: Callable[[str], str | None] = path_which) -> None:
        self.run, self.which = run, which

    def get(self, where: tuple[str, str, str], prop: str) -> int | bool | str:
        """Raises Unobservable when neither tool answers."""
        dest, path, iface = where
        try:
            if self.which("busctl"):
                return parse_busctl(self.run(["busctl", "--system", "get-property", dest, path, iface, prop]))
            if self.which("gdbus"):
                return parse_gdbus(self.run(["gdbus", "call", "--system", "--dest", dest, "--object-path", path,
                                             "--method", "org.freedesktop.DBus.Properties.Get", iface, prop]))
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            raise Unobservable(f"cannot read {iface}.{prop} on the system bus: {_why(e)}") from None
        raise Unobservable("neither busctl nor gdbus is installed to read the system bus")


def _why(e: BaseException) -> str:
    if isinstance(e, subprocess.CalledProcessError):
        return (e.stderr or "").strip().splitlines()[-1:][0] if (e.stderr or "").strip() else f"exit {e.returncode}"
    return str(e) or type(e).__name__


# -------------------------------------------------------------- observing
class Observer:
    """Reads the machine (see the module docstring). Each method raises
    Unobservable when it cannot tell."""

    def __init__(self, *, run: RunCommand = run_command, which: Callable[[str], str | None] = path_which,
                 platform: str = sys.platform, power_root: Path = POWER_SUPPLY,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.run, self.which, self.platform, self.power_root = run, which, platform, power_root
        self.bus = Bus(run, which)
        self.monotonic = monotonic

    def power(self) -> Power:
        if self.platform.startswith("linux"):
            return power_from_sysfs(self.power_root)
        return power_from_psutil()

    def idle_s(self) -> float:
        if self.platform == "darwin":
            try:
                return parse_hid_idle(self.run(["ioreg", "-c", "IOHIDSystem", "-d", "4", "-r", "-k", "HIDIdleTime"]))
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                raise Unobservable(f"cannot read HIDIdleTime from ioreg: {_why(e)}") from None
        if not self.bus.get(LOGIND, "IdleHint"):
            return 0.0
        since_us = self.bus.get(LOGIND, "IdleSinceHintMonotonic")
        if not isinstance(since_us, int) or since_us <= 0:
            return 0.0
        return max(0.0, self.monotonic() - since_us / 1e6)

    def network(self) -> tuple[bool, str, bool | None]:
        """(online, connectivity as NetworkManager words it, metered or None: unknown)."""
        try:
            state, level = self.bus.get(NM, "State"), self.bus.get(NM, "Connectivity")
            how = self.bus.get(NM, "Metered")
            return (state == NM_CONNECTED_GLOBAL or level == 4, NM_CONNECTIVITY.get(int(level), str(level)),
                    NM_METERED.get(int(how)))
        except Unobservable as bus_error:
            if not self.which("nmcli"):
                raise Unobservable(f"NetworkManager does not answer ({bus_error.message}) and nmcli is not"
                                   " installed") from None
        try:
            online, conn = parse_nmcli_general(self.run(["nmcli", "-t", "-f", "STATE,CONNECTIVITY", "general"]))
            metered = parse_nmcli_metered(self.run(["nmcli", "-t", "-f", "GENERAL.METERED", "device", "show"]))
        except (OSError, subprocess.SubprocessError) as e:
            raise Unobservable(f"NetworkManager does not answer: {_why(e)}") from None
        return online, conn, metered

    def disk_free(self, path: str) -> int:
        import psutil

        try:
            return int(psutil.disk_usage(path).free)
        except OSError as e:
            raise Unobservable(f"cannot read the free space of {path}: {e.strerror or e}") from None

    def load(self) -> float:
        return os.getloadavg()[0]


# ------------------------------------------------------------- conditions
POWER = ("ac", "battery")
KINDS = ("ac", "battery", "idle", "online", "unmetered", "disk", "load")


def kind_of(cond: str) -> str:
    return re.match(r"[a-z]+", cond).group(0)  # type: ignore[union-attr]  # checks.condition made it


class Conditions:
    """Whether conditions hold now, from an Observer's looks kept for
    ``max_age_s`` (``clock``: monotonic seconds). ``looks``: how many
    times it read the machine (tests count idle wake-ups with it)."""

    def __init__(self, observer: Observer | None = None, *, max_age_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.observer = observer or Observer()
        self.max_age_s, self.clock = max_age_s, clock
        self._seen: dict[str, tuple[float, object]] = {}  # what -> (when, value or the Unobservable)
        self.looks = 0

    def forget(self, what: Iterable[str] = ()) -> None:
        """Look again next time (all, or these kinds: a power event)."""
        if not what:
            self._seen.clear()
        for w in what:
            self._seen.pop(w, None)

    def _look(self, what: str, read: Callable[[], object]) -> object:
        now = self.clock()
        hit = self._seen.get(what)
        if hit is not None and now - hit[0] < self.max_age_s:
            value = hit[1]
        else:
            self.looks += 1
            try:
                value = read()
            except Unobservable as e:
                value = e
            self._seen[what] = (now, value)
        if isinstance(value, Unobservable):
            raise value
        return value

    def observable(self, when: Iterable[str], cwd: str | None = None) -> None:
        """Raises Unobservable (a BadRequest: refused at add) for a condition
        this machine cannot observe; looks at it now."""
        for cond in when:
            kind = kind_of(cond)
            seen = self._seen.get("power" if kind in POWER else "network" if kind == "unmetered" else kind)
            fresh = seen is None or isinstance(seen[1], Unobservable) or self.clock() - seen[0] >= FRESH_S
            try:
                self.why_not(cond, cwd, fresh=fresh)  # a batch of 10,000 such jobs: one look, not 10,000
            except Unobservable as e:
                raise Unobservable(f"--when {cond}: {e.message}", hint=_HINTS.get(kind)) from None

    def why_not(self, cond: str, cwd: str | None = None, *, fresh: bool = False) -> str | None:
        """None if ``cond`` holds, else why the job waits ("waiting for mains
        power"). Raises Unobservable."""
        kind = kind_of(cond)
        if fresh:
            self.forget([kind if kind not in POWER else "power", *(["network"] if kind == "unmetered" else [])])
        if kind in POWER:
            p: Power = self._look("power", self.observer.power)  # type: ignore[assignment]
            if kind == "ac":
                return None if p.on_mains else "waiting for mains power"
            want = float(cond.split(">=")[1])
            if p.on_mains or p.percent is None or p.percent >= want:
                return None
            return f"waiting for mains power or battery >= {want:g}% (at {p.percent:.0f}%)"
        if kind == "idle":
            want = parse_duration(cond.split("=")[1])
            idle = self._look("idle", self.observer.idle_s)
            assert isinstance(idle, float)
            return None if idle >= want else f"waiting for {format_duration(want)} idle (idle {format_duration(idle)})"
        if kind in ("online", "unmetered"):
            net: tuple[bool, str, bool | None] = self._look("network", self.observer.network)  # type: ignore[assignment]
            online, conn, metered = net
            if not online:
                return f"waiting for the network (NetworkManager: {conn})"
            if kind == "unmetered" and metered is not False:
                return "waiting for an unmetered network" + (" (metered: unknown)" if metered is None else "")
            return None
        if kind == "disk":
            want_b = size_bytes(cond.split(">=")[1], cond)
            where = cwd or os.path.expanduser("~")
            free = self._look(f"disk:{where}", lambda: self.observer.disk_free(where))
            assert isinstance(free, int)
            return None if free >= want_b else (f"waiting for {cond.split('>=')[1]} free in {where}"
                                                f" ({_size(free)} free)")
        if kind == "load":
            want_l = float(cond.split("<")[1])
            load = self._look("load", self.observer.load)
            assert isinstance(load, float)
            return None if load < want_l else f"waiting for load below {want_l:g} (now {load:.2f})"
        raise Unobservable(f"--when {cond}: not a condition this sloth knows")  # a newer client's

    def first_reason(self, when: Iterable[str], cwd: str | None = None) -> str | None:
        """Why the first of ``when`` that does not hold does not (None: all hold);
        one that cannot be observed any more says so (and does not hold)."""
        for cond in when:
            try:
                why = self.why_not(cond, cwd)
            except Unobservable as e:
                return f"waiting: --when {cond} cannot be observed now ({e.message})"
            if why is not None:
                return why
        return None


class PowerEvents:
    """Hears of power supply changes as they happen, where udev runs:
    ``udevadm monitor --udev --subsystem-match=power_supply`` prints a line
    per uevent (a charger plugged in or out, a battery's level step), and
    each calls ``changed``. Elsewhere (no udevadm, macOS) it does nothing
    and the looks every conditions_check_s are all there is. Started only
    while a job waits on, or runs under, a power condition; stopped after."""

    ARGV = ("udevadm", "monitor", "--udev", "--subsystem-match=power_supply")
    # It prints only when power changes, so nothing would end it after a daemon killed -9: util-linux's
    # setpriv (beside udevadm on every Linux that has it) asks the kernel to SIGTERM it when the daemon's
    # loop thread, which starts it, dies. preexec_fn could do the same, but is not safe in a daemon with threads.
    DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "TERM", "--")

    def __init__(self, changed: Callable[[], None], *, which: Callable[[str], str | None] = path_which) -> None:
        self.changed = changed
        self.available = which(self.ARGV[0]) is not None
        self.argv = (self.DIE_WITH_PARENT if which(self.DIE_WITH_PARENT[0]) else ()) + self.ARGV
        self.proc: Any = None
        self.heard = 0

    @property
    def running(self) -> bool:
        return self.proc is not None

    async def run(self) -> None:
        """Until stop(); returns at once without udevadm."""
        import asyncio

        if self.proc is not None or not self.available:
            return
        try:
            self.proc = proc = await asyncio.create_subprocess_exec(
                *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                stdin=asyncio.subprocess.DEVNULL)
        except OSError:
            self.proc = None
            return
        try:
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                if b"power_supply" in line:  # not the banner
                    self.heard += 1
                    self.changed()
        finally:
            self.stop()
            await proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass
        self.proc = None


_HINTS = {
    "idle": "On Linux the idle time comes from logind (IdleHint, set by the desktop's idle monitor) on the "
            "system bus; without a desktop session there is nothing to observe.",
    "online": "online and unmetered come from NetworkManager (busctl or nmcli); it does not run here.",
    "unmetered": "online and unmetered come from NetworkManager (busctl or nmcli); it does not run here.",
}


def _size(n: float) -> str:
    for unit, k in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= k:
            return f"{n / k:.1f}{unit}"
    return f"{n:.0f}"


def needs_power(when: Iterable[str]) -> bool:
    return any(kind_of(c) in POWER for c in when)
