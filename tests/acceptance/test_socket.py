"""The control socket of a real daemon: permissions, peer uid, path length, many and slow clients."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from sloth_daemon.cli.client import Client
from sloth_daemon.paths import SOCKET_PATH_MAX

pytestmark = pytest.mark.acceptance

NOBODY = 65534


def test_socket_is_0600_in_a_0700_dir(harness):
    harness.start()
    st = os.stat(harness.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(harness.socket.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(harness.home).st_mode) == 0o700  # the data dir too


PEER_PROBE = textwrap.dedent(
    """
    import json, os, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sys.argv[1])
    try:
        s.sendall(b'{"v": 1, "id": 1, "op": "ping", "args": {}}\\n')
    except OSError:
        pass  # the daemon may have answered and closed already
    buf = b""
    while not buf.endswith(b"\\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    print(json.dumps({"uid": os.getuid(), "reply": buf.decode()}))
    """
)


def as_nobody(*argv: str) -> list[str]:
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]


def python_for_nobody() -> str:
    """Our interpreter if uid 65534 may run it (it may live under a private
    home), else the system's: the probe needs only the standard library."""
    for exe in (sys.executable, "/usr/bin/python3", shutil.which("python3") or ""):
        if exe and subprocess.run(as_nobody(exe, "-I", "-c", "pass"), capture_output=True,
                                  cwd="/", timeout=30).returncode == 0:
            return exe
    raise AssertionError("no Python interpreter that uid 65534 may run (tried the venv's and /usr/bin/python3)")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_a_peer_of_another_uid_is_refused(harness, home):
    harness.start()
    python = python_for_nobody()
    # The 0700 run dir and the 0600 socket already keep other users out. To
    # prove the peer-uid check refuses them by itself, open the filesystem
    # permissions for the length of this test (the daemon does not notice:
    # it checks SO_PEERCRED on every connection).
    opened = [home, harness.home, harness.socket.parent, harness.socket]
    modes = {p: stat.S_IMODE(os.stat(p).st_mode) for p in opened}
    try:
        for p in opened:
            os.chmod(p, 0o777)
        p = subprocess.run(as_nobody(python, "-I", "-c", PEER_PROBE, str(harness.socket)),
                           capture_output=True, text=True, timeout=30, cwd="/")
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["uid"] == NOBODY
    reply = json.loads(out["reply"])
    assert reply["ok"] is False
    assert reply["error"]["code"] == "permission_denied"
    assert f"uid {NOBODY}" in reply["error"]["message"]
    # ... and the daemon carries on serving its owner, having counted the refusal.
    st = harness.call("status")
    assert st["server"]["refused_peers"] == 1
    jid = harness.add("true")
    assert harness.wait_state(jid, "done")


def test_a_too_long_socket_path_is_refused_with_the_fix(home):
    deep = home / ("d" * 60) / ("e" * 40)
    sock = deep / "run" / "sloth.sock"
    assert len(os.fsencode(str(sock))) > SOCKET_PATH_MAX
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_")}
    env.update(SLOTH_HOME=str(deep), NO_COLOR="1")
    p = subprocess.run([sys.executable, "-m", "sloth_daemon", "daemon", "run"], env=env,
                       capture_output=True, text=True, timeout=60, cwd=str(home))
    assert p.returncode != 0
    assert str(sock) in p.stderr
    assert f"at most {SOCKET_PATH_MAX}" in p.stderr
    assert "hint: Point SLOTH_HOME at a shorter folder" in p.stderr
    assert "Traceback" not in p.stderr
    # `sloth add` (which would start the daemon) passes the reason on.
    p = subprocess.run([sys.executable, "-m", "sloth_daemon", "add", "--", "true"], env=env,
                       capture_output=True, text=True, timeout=60, cwd=str(home))
    assert p.returncode != 0 and str(sock) in p.stderr and "Traceback" not in p.stderr
    assert not sock.exists()


ADDER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from sloth_daemon.cli.client import Client
    sock, name, n, go, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    ids = []
    with Client(Path(sock)) as c:
        Path(out + ".ready").touch()
        while not os.path.exists(go):  # start together, to contend
            time.sleep(0.001)
        for i in range(n):  # one request per job: 250 round trips each
            job = {"command": ["echo", f"{name}-{i}"]}
            ids += c.call("add", jobs=[job], common={"cwd": "/"})["ids"]
    Path(out).write_text(json.dumps(ids))
    """
)


def test_four_clients_enqueue_a_thousand_jobs_each_exactly_once(harness, home):
    harness.start()
    harness.call("pause")  # nothing runs: all 1,000 stay queued to be counted
    n, names = 250, ["a", "b", "c", "d"]
    go = home / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", ADDER, str(harness.socket), nm, str(n), str(go),
                          str(home / f"{nm}.json")], env=harness.env, cwd=str(harness.home))
        for nm in names
    ]
    harness.spawned += procs
    harness.wait_for(lambda: all((home / f"{nm}.json.ready").exists() for nm in names),
                     what="four clients connected")
    go.touch()
    for p in procs:
        assert p.wait(120) == 0
    ids = [i for nm in names for i in json.loads((home / f"{nm}.json").read_text())]
    assert len(ids) == len(set(ids)) == 4 * n
    jobs = harness.call("list", limit=100_000)["jobs"]
    assert len(jobs) == 4 * n
    assert {j["id"] for j in jobs} == set(ids)
    assert all(j["state"] == "queued" for j in jobs)
    seen = Counter(j["command"][1] for j in jobs)
    assert seen == Counter(f"{nm}-{i}" for nm in names for i in range(n))
    assert harness.call("status")["counts"]["queued"] == 4 * n


def test_four_concurrent_sloth_add_stdin(harness, home):
    harness.start()
    harness.call("pause")
    n = 250
    procs = []
    for nm in "wxyz":
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "sloth_daemon", "add", "--stdin", "--json"], env=harness.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=str(harness.home)))
    harness.spawned += procs
    outs = [p.communicate("".join(f"echo {nm}-{i}\n" for i in range(n)), timeout=120)
            for p, nm in zip(procs, "wxyz")]
    assert [p.returncode for p in procs] == [0] * 4, outs
    ids = [i for out, _ in outs for i in json.loads(out)["ids"]]
    assert len(set(ids)) == 4 * n
    # plain lines run directly (shell_lines.py): the argv is the line's words
    lines = Counter(" ".join(j["command"]) for j in harness.call("list", limit=100_000)["jobs"])
    assert lines == Counter(f"echo {nm}-{i}" for nm in "wxyz" for i in range(n))


def test_a_slow_client_does_not_stall_others(harness):
    harness.start()
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    slow.settimeout(30)
    slow.connect(str(harness.socket))
    frame = b'{"v": 1, "id": "slow", "op": "add", "args": {"jobs": [{"command": ["echo", "slow"]}]}}\n'
    slow.sendall(frame[:40])  # half a frame, then nothing
    try:
        # Meanwhile, others are served in full: requests, a job run to its end, a CLI.
        for _ in range(20):
            assert harness.call("ping")["pong"] is True
        jid = harness.add("echo", "fast")
        harness.wait_state(jid, "done")
        p = harness.cli("ls", "--all", "--json", check=True)
        assert [j["id"] for j in json.loads(p.stdout)["jobs"]] == [jid]
        with Client(harness.socket, timeout_s=10) as a, Client(harness.socket, timeout_s=10) as b:
            assert a.call("ping") and b.call("ping")
        # The slow one finishes its frame late and is still answered.
        slow.sendall(frame[40:])
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = slow.recv(65536)
            assert chunk, "daemon closed the slow client"
            buf += chunk
        reply = json.loads(buf)
        assert reply["id"] == "slow" and reply["ok"] is True
        slow_id = reply["result"]["ids"][0]
        assert harness.wait_state(slow_id, "done")
    finally:
        slow.close()


def test_client_reports_daemon_not_running_for_a_stale_socket(harness):
    # A socket file with nobody listening (a crashed daemon's leftover).
    harness.socket.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(harness.socket))
    s.close()
    harness.env["SLOTH_NO_START"] = "1"  # else `pause` starts a daemon, which takes the socket's place
    p = harness.cli("pause")
    del harness.env["SLOTH_NO_START"]
    assert p.returncode == 3
    assert "no sloth daemon is listening" in p.stderr and "Traceback" not in p.stderr
    p = harness.cli("ls", "--json")  # reading needs no daemon
    assert p.returncode == 0 and "read-only" in p.stderr
    # and a daemon started afterwards replaces the stale file and serves
    harness.start()
    assert harness.call("ping")["pong"] is True


def test_a_follower_too_slow_for_the_output_is_told_what_it_missed_and_still_ends(harness, home):
    """A `logs -f` client that stops reading while a job floods output: the
    daemon holds at most MAX_STREAM_BACKLOG chunks for it, says how many
    bytes it skipped, and the end of the stream always gets through."""
    harness.start()
    go = home / "go"
    jid = harness.add("sh", "-c", f"echo ready; while [ ! -e {go} ]; do sleep 0.01; done; head -c 200000000 /dev/zero")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(str(harness.socket))
    try:
        s.sendall(b'{"v": 1, "id": "f", "op": "follow", "args": {"id": %d}}\n' % jid)
        lines = s.makefile("rb")
        first = json.loads(lines.readline())  # following the live job now
        assert first["event"]["data"] == "ready\n"
        go.touch()
        harness.wait_state(jid, "done", timeout_s=60)  # all of it written while we read nothing
        events, final = 0, None
        skipped = ""
        for line in lines:
            msg = json.loads(line)
            if "event" in msg:
                events += 1
                if "bytes of live output skipped here" in msg["event"].get("data", ""):
                    skipped = msg["event"]["data"]
                continue
            final = msg
            break
        assert final is not None and final["ok"] is True, "the stream never ended"
        assert final["result"]["job"]["state"] == "done"
        assert skipped and f"sloth logs {jid}" in skipped
        assert events <= 1024 + 10  # the backlog cap, a snapshot chunk and the notice
    finally:
        s.close()
    assert harness.call("ping")["pong"] is True
