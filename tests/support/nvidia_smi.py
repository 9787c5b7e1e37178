"""A test `nvidia-smi` on PATH that prints what a real one prints, from
files the test writes (so each test controls what the GPUs look like,
and changes it while the daemon runs).

The outputs are NVIDIA's real formats, as captured from real machines
(two A100-SXM4-80GB; NVIDIA's `nvidia-smi --help-query-gpu` /
`--help-query-compute-apps` name the fields):

  nvidia-smi -L
      GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d)
  nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free --format=csv,noheader,nounits
      0, GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d, 81920, 2, 81226
  nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv
      pid, gpu_uuid, used_gpu_memory [MiB]
      10042, GPU-777aa4a9-8dac-a61b-5b5a-118d3e947546, 4435 MiB

(`--format=csv` keeps the header and the units; the daemon asks for
noheader,nounits and reads either.) ``mode``: "ok", "fail" (exit 9, as
when the driver is gone: "NVIDIA-SMI has failed because it couldn't
communicate with the NVIDIA driver"), "hang" (it never answers) or
"flood" (it never stops printing).
Every call is appended to ``calls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

UUIDS = ("GPU-fd189414-e0f6-58a0-7031-fefe0ce43b1d", "GPU-121ebc1f-3e5d-139d-7aac-57311d5bafc7")
NAME = "NVIDIA A100-SXM4-80GB"
TOTAL_MIB = 81920

SCRIPT = """#!/bin/sh
d="$(dirname "$0")"
echo "$*" >> "$d/calls"
mode="$(cat "$d/mode" 2>/dev/null)"
if [ "$mode" = hang ]; then exec sleep 600; fi
if [ "$mode" = flood ]; then exec yes "0, GPU-x, 1, 2, 3"; fi
if [ "$mode" = fail ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver." \\
       "Make sure that the latest NVIDIA driver is installed and running."
  exit 9
fi
case "$1" in
  -L) cat "$d/list" ;;
  --query-gpu=*) cat "$d/gpus" ;;
  --query-compute-apps=*) cat "$d/apps" ;;
  *) echo "unknown option $1" >&2; exit 2 ;;
esac
"""


@dataclass
class FakeSmi:
    bindir: Path

    def write(self, name: str, text: str) -> None:
        tmp = self.bindir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(self.bindir / name)  # a call never reads half a file

    def gpus(self, *free_mib: int, total_mib: int = TOTAL_MIB) -> None:
        """One line per GPU, memory in MiB (used as the driver counts it: total less free less reserved)."""
        self.write("gpus", "".join(f"{i}, {UUIDS[i]}, {total_mib}, {max(0, total_mib - f - 512)}, {f}\n"
                                   for i, f in enumerate(free_mib)))
        self.write("list", "".join(f"GPU {i}: {NAME} (UUID: {UUIDS[i]})\n" for i in range(len(free_mib))))

    def apps(self, *procs: tuple[int, int, int], header: bool = True) -> None:
        """(pid, gpu index, MiB used) each, in `--format=csv` (header and units) or noheader,nounits."""
        head = "pid, gpu_uuid, used_gpu_memory [MiB]\n" if header else ""
        unit = " MiB" if header else ""
        self.write("apps", head + "".join(f"{pid}, {UUIDS[g]}, {mib}{unit}\n" for pid, g, mib in procs))

    def mode(self, mode: str) -> None:
        self.write("mode", mode)

    def calls(self) -> list[str]:
        try:
            return (self.bindir / "calls").read_text().splitlines()
        except FileNotFoundError:
            return []


def fake_smi(bindir: Path, gpus: int = 2) -> FakeSmi:
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "nvidia-smi").write_text(SCRIPT)
    (bindir / "nvidia-smi").chmod(0o755)
    smi = FakeSmi(bindir)
    smi.gpus(*([TOTAL_MIB - 600] * gpus))
    smi.apps()
    smi.mode("ok")
    return smi
