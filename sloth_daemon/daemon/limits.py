"""The daemon's own resources: file descriptors and connections.

A desktop session starts the daemon with a soft limit of 1,024 descriptors
(systemd's and most shells' default) and a hard limit far above it. Every
client connection holds a descriptor, and so does every running job (the
pipe of its output, its pidfd, its log), and each spawn briefly takes a few
more. So at start the daemon raises its soft limit to the hard one (capped:
jobs inherit it, and some programs loop over every possible descriptor or
still use select()), and caps its connections so that a reserve is always
left for jobs: 1,100 idle clients can no longer starve every job of a
``pipe()``. A spawn that still fails for want of descriptors, processes or
memory is the daemon's trouble, not the job's: it is put off without using
up an attempt (daemon/worker/loop.py).
"""

from __future__ import annotations

import logging

log = logging.getLogger("sloth.limits")
NOFILE_CEILING = 65_536  # what jobs inherit at most
RESERVE_FDS = 128  # kept free of connections: the database, the loop, and jobs' pipes, pidfds and logs
MAX_CONNECTIONS = 1024


def raise_nofile(ceiling: int = NOFILE_CEILING) -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (at most ``ceiling``);
    return the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as e:  # macOS refuses above OPEN_MAX
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, want, e)
    return ceiling if soft == resource.RLIM_INFINITY else int(soft)


def connection_cap(nofile: int) -> int:
    """How many client connections to serve at once with ``nofile``
    descriptors: half of what the reserve leaves (a follower of a finished
    log holds the file open too), at least 8, at most MAX_CONNECTIONS."""
    return max(8, min(MAX_CONNECTIONS, (nofile - RESERVE_FDS) // 2))


class Postponement:
    """After a spawn failed for the daemon's own lack of resources, how long
    the worker claims nothing: 1 s, doubling to ``cap_s`` while it goes on
    failing; a spawn that works ends it. Times are on the awake clock."""

    def __init__(self, cap_s: float = 60.0) -> None:
        self.cap_s = cap_s
        self.until = float("-inf")
        self.failures = 0

    def failed(self, now: float) -> float:
        """A spawn failed at ``now``: return how long to wait. A failure heard
        while a wait holds comes of a spawn sent before it (a burst meets the
        same shortage several times at once): it waits out the same wait,
        without doubling it (20 failures of one burst waited 60 s)."""
        if now < self.until:
            return self.until - now
        delay = min(2.0 ** self.failures, self.cap_s)
        self.failures += 1
        self.until = now + delay
        return delay

    def started(self) -> None:
        self.failures = 0

    def holds(self, now: float) -> bool:
        return now < self.until
