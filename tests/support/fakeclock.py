"""Simulate "the laptop slept for N seconds" for one process tree.

``fakeclock.c`` is an LD_PRELOAD shim that adds an offset (read from a file)
to CLOCK_REALTIME, CLOCK_BOOTTIME and friends -- plus ``gettimeofday()``,
``time()`` and ``timespec_get()`` -- while leaving CLOCK_MONOTONIC and every
sleeping function alone.  That is what a resume from suspend looks like to a
process, so the daemon's sleep detection can be exercised in acceptance tests
without suspending anything.

Usage from a test module (tests/conftest.py loads this module as a plugin)::

    def test_detects_sleep(fakeclock):
        proc = subprocess.Popen(cmd, env={**os.environ, **fakeclock.env()})
        ...
        fakeclock.jump(3600)   # the "laptop" just slept for an hour

The shim notices a new offset within ``REFRESH_INTERVAL`` seconds (it stat()s
the offset file at most that often).  The environment (and so the fake clock)
is inherited by the process's children; drop ``LD_PRELOAD`` from a child's
environment to give it the real time again.  Only dynamically linked programs
that call the libc functions are affected (not static binaries, not Go
programs, not raw syscalls).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shlex
import shutil
import subprocess
import tempfile

import pytest

__all__ = [
    "ENV_VAR",
    "REFRESH_INTERVAL",
    "SOURCE",
    "CompilerNotFound",
    "FakeClock",
    "build",
    "fakeclock",
]

SOURCE = pathlib.Path(__file__).with_name("fakeclock.c")
#: Environment variable naming the offset file (read once by the shim).
ENV_VAR = "SLOTH_FAKECLOCK_FILE"
#: Upper bound (seconds) on how long a running process takes to see a jump.
REFRESH_INTERVAL = 0.05

_CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Wextra")
_LIBS = ("-ldl",)


class CompilerNotFound(RuntimeError):
    """No C compiler is available; callers may turn this into a skip."""


def _find_compiler() -> list[str]:
    explicit = os.environ.get("CC", "").strip()
    if explicit:
        argv = shlex.split(explicit)
        if shutil.which(argv[0]):
            return argv
        raise CompilerNotFound(
            f"fakeclock: $CC={explicit!r} is not an executable; cannot build the "
            "LD_PRELOAD clock shim"
        )
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    raise CompilerNotFound(
        "fakeclock: no C compiler found (tried $CC, cc, gcc, clang); install "
        "gcc to build the LD_PRELOAD clock shim used by the sleep tests"
    )


def build(dest_dir: pathlib.Path) -> pathlib.Path:
    """Compile ``fakeclock.c`` into *dest_dir* and return the ``.so`` path.

    The output name contains a hash of the source and flags, so an existing
    build is reused and a changed source is rebuilt.  Concurrent builders are
    safe (each compiles to a temporary name, then renames).

    Raises :class:`CompilerNotFound` (a ``RuntimeError``) when there is no C
    compiler, and ``RuntimeError`` with the compiler output when compiling
    fails.
    """
    dest_dir = pathlib.Path(dest_dir)
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + b"\0" + " ".join(_CFLAGS + _LIBS).encode()).hexdigest()
    out = dest_dir / f"fakeclock-{digest[:16]}.so"
    if out.is_file():
        return out

    compiler = _find_compiler()
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".fakeclock-", suffix=".so", dir=dest_dir)
    os.close(fd)
    try:
        cmd = [*compiler, *_CFLAGS, "-o", tmp, str(SOURCE), *_LIBS]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except OSError as exc:
            raise CompilerNotFound(f"fakeclock: cannot run {compiler[0]}: {exc}") from exc
        if res.returncode != 0:
            raise RuntimeError(
                f"fakeclock: building the shim failed (exit {res.returncode}):\n"
                f"$ {shlex.join(cmd)}\n{res.stdout}{res.stderr}"
            )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


class FakeClock:
    """Controls the clock offset seen by processes started with :meth:`env`.

    Creating the object (re)writes the offset file with 0.
    """

    def __init__(self, so_path: os.PathLike[str] | str, offset_file: os.PathLike[str] | str):
        self.so_path = pathlib.Path(so_path).absolute()
        self.offset_file = pathlib.Path(offset_file).absolute()
        # ld.so splits LD_PRELOAD on spaces and colons.
        if any(c in str(self.so_path) for c in " :\t\n"):
            raise ValueError(f"fakeclock: LD_PRELOAD cannot hold this path: {self.so_path}")
        self._offset = 0.0
        self._write()

    def env(self) -> dict[str, str]:
        """Variables to add to a child's environment to run it on fake time."""
        return {"LD_PRELOAD": str(self.so_path), ENV_VAR: str(self.offset_file)}

    @property
    def offset(self) -> float:
        """Total seconds the fake clocks are ahead of the real ones."""
        return self._offset

    def jump(self, seconds: float) -> None:
        """Pretend the machine was suspended for *seconds* more.

        Running processes see it within :data:`REFRESH_INTERVAL` seconds.
        """
        self._offset += float(seconds)
        self._write()

    def _write(self) -> None:
        # Fixed-point text: exact for the shim's integer-nanosecond parser.
        tmp = self.offset_file.with_name(f".{self.offset_file.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{self._offset:.9f}\n")
        os.replace(tmp, self.offset_file)

    def __repr__(self) -> str:
        return f"FakeClock(offset={self._offset!r}, offset_file={str(self.offset_file)!r})"


_SO_KEY = pytest.StashKey[pathlib.Path]()


@pytest.fixture
def fakeclock(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> FakeClock:
    """A fresh :class:`FakeClock` (offset 0) with its own offset file.

    The shim is compiled once per test session (cached on the pytest config,
    so importing just this fixture is enough); the test is skipped when no C
    compiler is available.
    """
    so_path = request.config.stash.get(_SO_KEY, None)
    if so_path is None:
        try:
            so_path = build(tmp_path_factory.mktemp("fakeclock-so", numbered=True))
        except CompilerNotFound as exc:
            pytest.skip(str(exc))
        request.config.stash[_SO_KEY] = so_path
    return FakeClock(so_path, tmp_path_factory.mktemp("fakeclock") / "offset")
