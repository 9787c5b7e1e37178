"""A job's limits (--mem, --cpus, --nice, --io) and --keep-awake, with its
lane's ``[lanes.NAME]`` settings under its own: what it asks the keeper to
apply to its run (keeper/keep_awake.py and keeper/resource_limits.py do), checked when it is added against
what this machine can apply. Each limit's mechanism is found (keeper/resource_limits.py
probe) and recorded with the job (``via``: `sloth show` says it); a limit or
keep-awake that cannot be had here is refused, never ignored (issue 24).

Not to be confused with daemon/limits.py (the daemon's own descriptor
limits) nor with `sloth hold` (a queued job kept from being claimed)."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Mapping

from sloth_daemon.config import Settings
from sloth_daemon.errors import FieldError
from sloth_daemon.spec import JobSpec

Probe = Callable[[], Mapping[str, Any]]
OPTION = {"mem": "--mem", "cpus": "--cpus", "nice": "--nice", "io": "--io"}
AWAKE_PROBE_TTL_S = 10.0  # a burst of adds asks logind once (a bus that comes or goes is seen soon after)
_awake: list[Any] = [-1e18, None]  # when keep_awake_here was last asked, and its answer


def keep_awake_here(now: float | None = None) -> tuple[str | None, str | None]:
    """keep_awake.keep_awake_here, asked at most every AWAKE_PROBE_TTL_S."""
    now = time.monotonic() if now is None else now
    if now - _awake[0] >= AWAKE_PROBE_TTL_S:
        from sloth_daemon.keeper import keep_awake  # here: psutil only once a job asks (docs/idle.md)

        _awake[:] = [now, keep_awake.keep_awake_here()]
    return _awake[1]


def asks_any(spec: Mapping[str, Any], settings: Settings) -> bool:
    """Whether a job object (the add op's) may ask for anything held."""
    return bool(settings.lane_holds) or "limits" in spec or "keep_awake" in spec


def check_keep_awake(own: bool, lane: str, settings: Settings) -> None:
    """Keep-awake asked (``own``: --keep-awake, or the lane's setting) where
    nothing here can hold it: FieldError, said at add (a job, a schedule),
    never a job that runs on believing it was held. (A schedule's later
    occurrences are not refused: the run's history says it was not held.)"""
    if not (own or settings.lane_holds.get(lane, {}).get("keep_awake")):
        return
    tool, why = keep_awake_here()
    if tool is None:
        raise FieldError("--keep-awake" if own else f"[lanes.{lane}] keep_awake",
                         f"cannot be had on this machine: {why}",
                         hint="Leave it out here (the job runs; the machine may sleep), or see "
                              "`sloth doctor` (keep-awake) for what it needs.")


def applied_here(spec: JobSpec, settings: Settings, probe: Probe | None = None) -> JobSpec:
    """``spec`` with its lane's settings under its own and each limit's
    mechanism (``probe``: keeper/resource_limits.py's, loaded only for a job with
    limits, docs/idle.md); raises FieldError for a limit nothing here can apply."""
    lane = settings.lane_holds.get(spec.lane, {})
    own = json.loads(spec.limits_json) if spec.limits_json else {}
    limits = {**lane.get("limits", {}), **own}
    keep = spec.keep_awake or bool(lane.get("keep_awake", False))
    if not limits:
        return spec if keep == spec.keep_awake else spec._replace(keep_awake=keep)
    if probe is None:
        from sloth_daemon.keeper import resource_limits

        probe = resource_limits.probe
    found = probe()
    via = {}
    for name in ("mem", "cpus", "nice", "io"):
        if name not in limits:
            continue
        if found.get(name) is None:
            raise FieldError(OPTION[name], f"cannot be applied on this machine: {found.get('why_' + name)}",
                             hint="Leave it out here, or see `sloth doctor` for what applies limits here.")
        via[name] = found[name]
    if "nice" in limits and limits["nice"] < os.getpriority(os.PRIO_PROCESS, 0) and os.geteuid() != 0:
        raise FieldError("--nice", f"{limits['nice']} is below the daemon's own niceness "
                                 f"({os.getpriority(os.PRIO_PROCESS, 0)}): only root may raise a priority")
    if "mem" in limits or "cpus" in limits:
        limits["mem_via"] = "scope" if str(found.get("cpus" if "cpus" in limits else "mem")).startswith("cgroup") \
            else "rlimit"
    limits["via"] = via
    return spec._replace(keep_awake=keep, limits_json=json.dumps(limits, sort_keys=True))
