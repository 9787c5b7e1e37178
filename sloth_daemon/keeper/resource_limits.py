"""A run's resource limits (``--mem``, ``--cpus``, ``--nice``, ``--io``),
applied by the keeper for the run's whole life, and which of their
mechanisms this machine has (``probe``: `sloth add` refuses a limit none
can apply, `sloth doctor` and `sloth show` say which applied).

Limits: memory through a delegated cgroup v2 (``systemd-run --user
--scope -p MemoryMax=``) where a user systemd bus is there, else
setrlimit(RLIMIT_DATA) on Linux (each process of the job may map that much
private writable memory; RLIMIT_AS would also count address space reserved
and never used, which breaks Go, Java and sanitizer runtimes); cpus only
through the cgroup (``-p CPUQuota=``, systemd 252+ for a user scope);
nice through setpriority; io through the ioprio_set syscall (Linux).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
from typing import Any, Callable


IO_CLASSES = {"realtime": 1, "best-effort": 2, "idle": 3}
# ioprio_set's number where it differs by machine (asm-generic: 30).
IOPRIO_SET = {"x86_64": 251, "i386": 289, "i686": 289, "armv7l": 314, "ppc64le": 273, "ppc64": 273,
              "s390x": 282, "aarch64": 30, "riscv64": 30}
IOPRIO_WHO_PROCESS = 1
CPU_SCOPE_SYSTEMD = 252


def _user_bus() -> bool:
    """A user systemd instance answers here (its bus socket exists)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return bool(runtime and os.path.exists(os.path.join(runtime, "bus"))) or "DBUS_SESSION_BUS_ADDRESS" in os.environ


def _cgroup2() -> bool:
    return os.path.exists("/sys/fs/cgroup/cgroup.controllers")


@functools.lru_cache(maxsize=1)
def _systemd_version() -> int | None:
    tool = shutil.which("systemd-run")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"systemd (\d+)", out)
    return int(m.group(1)) if m else None


def probe() -> dict[str, str | None]:
    """Which mechanism applies each limit here (None: none can), with why
    not under ``why_<name>``. Runs `systemd-run --version` once."""
    scope = sys.platform.startswith("linux") and _user_bus() and _cgroup2() and _systemd_version() is not None
    version = _systemd_version() if scope else None
    out: dict[str, str | None] = {}
    if scope:
        out["mem"] = "cgroup v2 (systemd-run --user --scope -p MemoryMax)"
    elif sys.platform.startswith("linux"):
        out["mem"] = "setrlimit(RLIMIT_DATA), per process"
        out["why_scope"] = ("no user systemd bus" if not _user_bus() else "no cgroup v2 hierarchy"
                            if not _cgroup2() else "no systemd-run")
    else:
        out["mem"], out["why_mem"] = None, "this platform enforces no memory rlimit and has no cgroups"
    if scope and version is not None and version >= CPU_SCOPE_SYSTEMD:
        out["cpus"] = "cgroup v2 (systemd-run --user --scope -p CPUQuota)"
    else:
        out["cpus"] = None
        out["why_cpus"] = (f"a delegated cgroup v2 is needed (systemd-run --user, systemd {CPU_SCOPE_SYSTEMD}+); here: "
                           + (out.get("why_scope") or out.get("why_mem") or f"systemd {version}"))
    out["nice"] = "setpriority"
    machine = platform.machine()
    if sys.platform.startswith("linux") and machine in IOPRIO_SET:
        out["io"] = "ioprio_set"
    else:
        out["io"], out["why_io"] = None, f"no ioprio_set here ({sys.platform} {machine})"
    return out


def scope_argv(limits: dict[str, Any], argv: list[str], job_id: int) -> list[str]:
    """The job's command inside a transient user scope that holds its
    memory and cpu limits (systemd-run execs the command itself: same pid)."""
    props = []
    if limits.get("mem"):
        props += ["-p", f"MemoryMax={int(limits['mem'])}", "-p", "MemorySwapMax=0"]
    if limits.get("cpus"):
        props += ["-p", f"CPUQuota={round(float(limits['cpus']) * 100)}%"]
    return ["systemd-run", "--user", "--scope", "--quiet", "--collect", f"--unit=sloth-job-{job_id}-{os.getpid()}",
            *props, "--", *argv]


def preexec(limits: dict[str, Any]) -> Callable[[], None] | None:
    """What the job's process sets on itself before its command runs
    (rlimit memory, nice, io class), or None if nothing is to be set there."""
    mem = limits.get("mem") if limits.get("mem_via") == "rlimit" else None
    nice, io = limits.get("nice"), limits.get("io")
    if mem is None and nice is None and io is None:
        return None
    ioprio = _ioprio(io) if io is not None else None
    syscall = ctypes.CDLL(None, use_errno=True).syscall if ioprio is not None else None
    number = IOPRIO_SET.get(platform.machine())

    def apply() -> None:  # in the child, between fork and exec: nothing that allocates much
        if mem is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (int(mem), int(mem)))
        if nice is not None:
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))
        if syscall is not None and number is not None:
            syscall(number, IOPRIO_WHO_PROCESS, 0, ioprio)
    return apply


def _ioprio(io: str) -> int:
    """"idle", "best-effort" or "best-effort:N" (N 0..7) as ioprio_set's value."""
    name, _, level = io.partition(":")
    return (IO_CLASSES[name] << 13) | (int(level) if level else 4 if name == "best-effort" else 0)


LIMIT_KEYS = frozenset({"mem", "cpus", "nice", "io", "mem_via", "via"})
MEM_VIAS = ("rlimit", "scope")


def check(limits: dict[str, Any]) -> None:
    """Raise ValueError unless ``limits`` is what a daemon sends (checks.limits_json's, and how)."""
    def num(k: str, lo: float, hi: float, kind: type = float) -> None:
        v = limits.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int)
                              or not lo <= v <= hi):
            raise ValueError(f"{k} must be a number from {lo:g} to {hi:g}")
    num("mem", 1 << 20, 2**62, int)
    num("cpus", 0.01, 4096)
    num("nice", -20, 19, int)
    if limits.get("io") is not None:
        name, _, level = str(limits["io"]).partition(":")
        if name not in ("idle", "best-effort") or (level and level not in "01234567"):
            raise ValueError(f"io class {limits['io']!r} is not idle or best-effort[:N]")
    if limits.get("mem") is not None and limits.get("mem_via") not in MEM_VIAS:
        raise ValueError(f"mem_via must be one of {', '.join(MEM_VIAS)}")
    if limits.get("cpus") is not None and limits.get("mem_via") != "scope":
        raise ValueError("cpus needs mem_via scope (a cgroup)")


def describe(limits: dict[str, Any]) -> str:
    """"mem 100M (setrlimit(RLIMIT_DATA), per process), nice 10 (setpriority)"."""
    from sloth_daemon.checks import format_size

    via = limits.get("via") or {}
    parts = []
    for k in ("mem", "cpus", "nice", "io"):
        if limits.get(k) is not None:
            v = format_size(int(limits[k])) if k == "mem" else str(limits[k])
            parts.append(f"{k} {v}" + (f" ({via[k]})" if via.get(k) else ""))
    return ", ".join(parts)


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 folder process ``pid`` is in, or None."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return "/sys/fs/cgroup" + line[3:].strip()
    except OSError:
        return None
    return None


MEMORY_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory",
                  b"Out of memory", b"memory allocation failed", b"failed to allocate")


def exceeded_memory(limits: dict[str, Any] | None, returncode: int | None, tail: bytes,
                    oom_kills: int | None) -> bool:
    """Whether a run that ended so ended by its memory limit: the cgroup's
    memory.events counted an oom_kill; or, under the rlimit, it failed with
    an allocation error in the last of its output (the rlimit makes an
    allocation fail; the program says so, or dies: that is all one sees)."""
    if not limits or not limits.get("mem") or returncode == 0:
        return False
    if oom_kills:
        return True
    return limits.get("mem_via") == "rlimit" and any(m in tail for m in MEMORY_MARKERS)


def oom_kills(cgroup: str | None) -> int | None:
    if cgroup is None:
        return None
    try:
        with open(os.path.join(cgroup, "memory.events")) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return 0


def cgroup_usage(cgroup: str) -> dict[str, Any] | None:
    """What a cgroup v2 folder says its processes used: {"cpu_s": user +
    system (cpu.stat usage_usec), "peak_rss_bytes": memory.peak (None before
    Linux 5.19)}, or None if it cannot be read (gone: the scope ended)."""
    try:
        with open(os.path.join(cgroup, "cpu.stat")) as f:
            usec = next(int(line.split()[1]) for line in f if line.startswith("usage_usec "))
    except (OSError, ValueError, StopIteration, IndexError):
        return None
    try:
        with open(os.path.join(cgroup, "memory.peak")) as f:
            peak: int | None = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        peak = None
    return {"cpu_s": usec / 1e6, "peak_rss_bytes": peak}
