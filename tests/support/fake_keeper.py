"""A keeper of another sloth version, for tests: it takes the data dir's
keeper lock (waiting for it with --wait, as a keeper started while another
ends would), writes its pid there as a keeper does, listens where the
keeper listens and answers every hello in protocol v2 (ours is v1),
listing two runs it holds.

    python -m tests.support.fake_keeper DATA_DIR RUNTIME_DIR [--wait]

Prints "ready" once it listens.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys

PROTOCOL = 2


def main(data_dir: str, runtime_dir: str, wait: bool) -> None:
    lock = os.open(os.path.join(data_dir, "keeper.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
    os.makedirs(runtime_dir, mode=0o700, exist_ok=True)
    path = os.path.join(runtime_dir, "keeper.sock")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(16)
    print("ready", flush=True)
    hello = {"v": PROTOCOL, "id": 1, "ok": True,
             "result": {"version": "9.0.0", "protocol": PROTOCOL, "pid": os.getpid(), "features": ["after"],
                        "started_at": 0, "runs": [{"key": "9.1"}, {"key": "9.2"}], "padding": "x" * 200}}
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.makefile("rb").readline()
            conn.sendall(json.dumps(hello).encode() + b"\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--wait" in sys.argv[3:])
