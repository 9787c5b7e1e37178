"""Several machines on one queue, on this one machine: daemons each with a
SLOTH_HOME and a host name of its own, on one real PostgreSQL database.
With ``netns`` each daemon runs in a network namespace of its own and
reaches the server over a veth pair, so that a test can cut one machine
off (``ip link set ... down``, a network partition) and heal it; the server
listens on the veth addresses.

Everything is removed afterwards, also when a test fails or pytest is
killed: daemons, keepers and jobs (Harness.reap: every process that carries
a home's SLOTH_HOME), the namespaces and their links (and a watchdog that
removes them if this process dies first), the cluster (its own watchdog).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

from tests.support.harness import Harness, alive, kill_and_wait
from tests.support.pg import PgCluster, fast_tmp

PROBE = str(Path(__file__).with_name("probe_job.py"))


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2; .ci/run installs it)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Link:
    """A network namespace joined to this one by a veth pair (/30)."""

    def __init__(self, tag: str, i: int, net: tuple[int, int]) -> None:
        self.ns = f"slm{tag}{i}"
        self.host_if, self.ns_if = f"slh{tag}{i}", f"sln{tag}{i}"
        base = f"10.{net[0]}.{net[1]}"
        self.host_ip, self.ns_ip = f"{base}.{4 * i + 1}", f"{base}.{4 * i + 2}"

    def create(self) -> None:
        _ip("netns", "add", self.ns)
        _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _ip("link", "set", self.ns_if, "netns", self.ns)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        _ip("link", "set", self.host_if, "up")
        _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")
        _ip("-n", self.ns, "link", "set", "lo", "up")

    def cut(self) -> None:
        """The partition: packets between the machine and the server are lost."""
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def remove(self) -> None:
        for args in (("netns", "del", self.ns), ("link", "del", self.host_if)):
            with contextlib.suppress(subprocess.SubprocessError):
                _ip(*args)


class Network:
    """The server (in ``parent``, default tmpfs), and (with ``netns``) a
    namespace per machine: made once for a module, with a fresh database per
    Machines."""

    def __init__(self, n: int, *, netns: bool, parent: str | None = None) -> None:
        self.tag = f"{random.randrange(16**4):04x}"
        net = (random.randrange(100, 250), random.randrange(0, 250))
        self.links = [Link(self.tag, i, net) for i in range(n)] if netns else []
        self.cluster: PgCluster | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        try:
            for link in self.links:
                link.create()
            self._start_watchdog()
            self.cluster = PgCluster(parent or fast_tmp(), listen=tuple(ln.host_ip for ln in self.links),
                                     trust=(f"10.{net[0]}.{net[1]}.0/24",) if netns else ())
        except BaseException:
            self.close()
            raise

    def daemon_url(self, i: int, db: str) -> str:
        assert self.cluster is not None
        if self.links:
            return self.cluster.tcp_url(db, host=self.links[i].host_ip)
        return self.cluster.url(db)

    def _start_watchdog(self) -> None:
        if not self.links:
            return
        dels = "; ".join(f"ip netns del {ln.ns}; ip link del {ln.host_if}" for ln in self.links)
        script = f'while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; {dels}'
        self._watchdog = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.destroy()
        for link in self.links:
            link.remove()
        if self._watchdog is not None and self._watchdog.poll() is None:
            self._watchdog.kill()
            self._watchdog.wait()


class Machine(Harness):
    """One machine: a home, a host name, a queue URL, maybe a namespace."""

    def __init__(self, home: Path, name: str, *, config: str, url: str, cli_url: str, netns: str | None,
                 env: dict[str, str] | None = None) -> None:
        super().__init__(home, config=f'host = "{name}"\n' + config, extra_env={"SLOTH_QUEUE_URL": url, **(env or {})})
        self.name, self.netns = name, netns
        self.env["SLOTH_QUEUE_URL"] = cli_url

    def start(self, *, wait: bool = True, env: dict[str, str] | None = None,
              nofile: tuple[int, int] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.daemon_log, "ab")
        argv = [sys.executable, "-m", "sloth_daemon", "daemon", "run"]
        self.daemon = subprocess.Popen(
            (["ip", "netns", "exec", self.netns] if self.netns else []) + argv,
            env=dict(self.daemon_env, **(env or {})), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=str(self.home))
        log.close()
        self.spawned.append(self.daemon)
        if wait:
            self.wait_ready(self.daemon, timeout_s=60)
        return self.daemon

    def keeper(self) -> psutil.Process:
        return psutil.Process(self.keeper_pid())

    def everything(self) -> list[psutil.Process]:
        """What a crash of this machine would take: the daemon, its keeper
        and the jobs the keeper runs (not jobs queued here that run elsewhere)."""
        assert self.daemon is not None
        keeper = self.keeper()
        return [psutil.Process(self.daemon.pid), keeper, *keeper.children(recursive=True)]

    def crash(self) -> None:
        """kill -9 of everything of this machine at once (a power cut)."""
        kill_and_wait(self.everything(), [self.daemon] if self.daemon is not None else [])


class Machines:
    """``n`` machines (names a, b, c, ...) on a fresh database of ``network``;
    ``sloth db migrate`` run first, as a user would."""

    def __init__(self, network: Network, n: int, *, config_of: Callable[[int], str],
                 env: Callable[[int], dict[str, str]] = lambda i: {}) -> None:
        assert network.cluster is not None
        self.network = network
        self.root = Path(tempfile.mkdtemp(prefix="slm-"))
        self.db = f"q{os.getpid()}_{random.randrange(10**9)}"
        network.cluster.create_database(self.db)
        self.machines = [
            Machine(self.root / name, name, config=config_of(i), url=network.daemon_url(i, self.db),
                    cli_url=network.cluster.url(self.db),
                    netns=network.links[i].ns if network.links else None, env=env(i))
            for i, name in enumerate("abcdefgh"[:n])]
        self.machines[0].cli("db", "migrate", check=True)

    def __getitem__(self, i: int) -> Machine:
        return self.machines[i]

    def __iter__(self) -> Iterator[Machine]:
        return iter(self.machines)

    def start(self) -> None:
        for m in self.machines:
            m.start(wait=False)
        for m in self.machines:
            assert m.daemon is not None
            m.wait_ready(m.daemon, timeout_s=60)

    def close(self) -> None:
        for m in self.machines:
            m.reap()
        with contextlib.suppress(Exception):
            assert self.network.cluster is not None
            self.network.cluster.drop_database(self.db)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Machines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(pred: Callable[[], Any], timeout_s: float, what: str, step_s: float = 0.02) -> Any:
    """Poll ``pred`` until truthy: a bound on waiting, never a timed assertion."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # a daemon restarting, a file not yet written
            last = e
        time.sleep(step_s)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


__all__ = ["Link", "Machine", "Machines", "Network", "PROBE", "alive", "netns_unavailable", "wait_until"]
