"""A process of the same uid that talks to a keeper as if it were the
daemon (issue 20 item 8): ``python -m tests.support.impostor SOCKET PID
[OP ...]`` says hello as the daemon claiming ``PID`` ("self": its own),
then sends each OP (spawn, kill, ack with made-up arguments) and prints
every reply, one JSON line each."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

ARGS = {
    "spawn": {"key": "forged", "job_id": 1, "attempt": 1, "token": "forged", "argv": ["true"],
              "env": {"PATH": "/usr/bin:/bin"}, "log_path": "/tmp/forged.log", "log_cap": 1024},
    "kill": {"key": "any", "reason": "forged"},
    "ack": {"keys": ["any"]},
    "trust": {"items": []},
}


def main(argv: list[str]) -> None:
    path, claim, *ops = argv
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    f = s.makefile("rb")
    pid = os.getpid() if claim == "self" else int(claim)
    for i, (op, args) in enumerate([("hello", {"role": "daemon", "pid": pid, "name": "impostor"}),
                                    *((op, ARGS[op]) for op in ops)], 1):
        s.sendall(json.dumps({"v": 1, "id": i, "op": op, "args": args}).encode() + b"\n")
        while True:  # events (the daemon's, if we were taken for it) are not replies
            msg = json.loads(f.readline())
            if msg.get("id") == i:
                break
        print(json.dumps(msg), flush=True)


def run(sock: Any, claim: int | str, *ops: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Run the impostor as a process of its own; its replies."""
    p = subprocess.run([sys.executable, "-m", "tests.support.impostor", str(sock), str(claim), *ops],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


if __name__ == "__main__":
    main(sys.argv[1:])
