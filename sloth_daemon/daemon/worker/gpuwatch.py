"""The GPUs' watch: when nvidia-smi is asked besides a claim, and what a
reading tells about runs already started (docs/gpus.md).

While runs hold GPU tokens, or jobs wait on what nvidia-smi says (a GPU
busy outside sloth, too little memory free), a reading is taken every
``[resources.gpu] check_s`` (30 s by default): no event says that a
process outside sloth let go of a GPU. Each reading that comes makes the
next turn claim (a job waiting for it may start) and is checked against
the runs: a run's process (found by the SLOTH_JOB_TOKEN in its
environment, or an ancestor's) on a GPU it was not given gets a line in
its history, once per run ("pid 4242 uses gpu 1; it was given gpu 0").
"""

from __future__ import annotations

import logging

from sloth_daemon.clock import ClockReadings, Clocks
from sloth_daemon.daemon.gpus import Reading, wrong_gpu
from sloth_daemon.daemon.resources import GPU, split_token
from sloth_daemon.daemon.worker.gates import Gates
from sloth_daemon.daemon.worker.runs import Attempts
from sloth_daemon.daemon.worker.signals import Signals
from sloth_daemon.errors import SlothError
from sloth_daemon.queue import Queue

log = logging.getLogger("sloth.gpus")
CHECK_S = 30.0


class GpuWatch:
    """State: when it looks next, the runs already told of a wrong GPU.
    Collaborators: the gates (their probe, whether jobs wait on it), the
    queue (a run's history line), the runs, signals, clocks."""

    def __init__(self, gates: Gates, queue: Queue, running: Attempts, signals: Signals, clocks: Clocks) -> None:
        self.gates, self.queue, self.running, self.signals = gates, queue, running, signals
        self.next_look = clocks.read().awake
        self.told: set[str] = set()  # run tokens whose wrong GPU is in their history
        self.first = True  # no reading taken yet

    def _gpu_runs(self) -> list[tuple[str, int, list[str]]]:
        """(token, job id, GPU tokens given) of each run holding GPUs."""
        return [(r.token, r.job.id, [split_token(t)[0] for t in (r.job.tokens or {}).get(GPU, [])])
                for r in self.running.values() if r.outcome is None and (r.job.tokens or {}).get(GPU)]

    def watched(self) -> bool:
        return self.gates.gpus.present() and (self.gates.gpu_waiting or bool(self._gpu_runs()))

    def check_s(self) -> float:
        return float(self.gates.settings.resource_opts.get(GPU, {}).get("check_s", CHECK_S))

    def watch(self, r: ClockReadings) -> None:
        """A turn's look, if one is due: a reading is asked for (it comes to ``fresh``)."""
        if self.first and self.gates.gpus.present():  # one reading at start: add judges gpu-mem by the GPUs' sizes
            self.first = False
            self.gates.gpus.soon()
        if r.awake < self.next_look or not self.watched():
            return
        self.next_look = r.awake + self.check_s()
        self.gates.gpus.soon()

    def deadline(self, r: ClockReadings) -> float | None:
        return self.next_look - r.awake if self.watched() else None

    def fresh(self, reading: Reading) -> None:
        """A reading came (the probe's on_fresh): claim again; check the runs."""
        self.signals.look = True
        self.signals.wake()
        if reading.error is not None:
            return
        live = set()
        for token, job_id, given in self._gpu_runs():
            live.add(token)
            wrong = wrong_gpu(reading, token, given) if token not in self.told else []
            if not wrong:
                continue
            self.told.add(token)
            pids = ", ".join(f"pid {pid} uses gpu {idx}" for pid, idx in wrong[:5])
            message = f"{pids}; it was given gpu {','.join(given)} (CUDA_VISIBLE_DEVICES={','.join(given)})"
            log.warning("job %d: %s", job_id, message)
            try:
                self.queue.note_run(job_id, token, "gpu", message)
            except SlothError as e:  # ended meanwhile: nothing to say any more
                log.info("job %d: not noted: %s", job_id, e.message)
        self.told &= live
