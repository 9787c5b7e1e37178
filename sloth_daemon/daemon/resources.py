"""Named resources, each machine's own: ``[resources]`` in config.toml
(``gpu = ["0", "1"]``; ``licence = 3`` is three anonymous tokens), and the
GPUs ``nvidia-smi -L`` lists when the file names no ``gpu``.

A run holds the tokens it was given from its claim until its end, however
it ends: they are written with its claim (the job row's ``tokens``), so
what is in use is always what the runs this daemon holds hold (Attempts),
adopted runs included -- a restarted daemon finds them held without a
table of its own that could drift. The job gets them in its environment:
``SLOTH_<NAME>=1,3`` (and ``CUDA_VISIBLE_DEVICES`` for ``gpu``).

Not starving a big job (the rule): waiting jobs are looked at most urgent
first (priority, then the one due first); one that cannot have all it
needs reserves what is free of it, so a job behind it may only take tokens
it is not waiting for. A two-gpu job behind a stream of one-gpu jobs gets
the first two that come free.

Shares (docs/gpus.md): each token is 1000 milli-shares (integers: no
float drift). ``--needs gpu=0.5`` takes 500 of one token; a whole count
takes that many tokens, each ``1000 // shares`` of it, where ``shares`` is
the resource's per-token share count in config (``[resources.gpu] shares =
2``: two ``--needs gpu=1`` jobs per GPU; 1 by default: a whole token). A
run's share is written with its token (``"0@500"``: 500 of token 0), so
what is in use never depends on the config in force. Tokens are looked at
in the preferred order (the configured list, or ``order``) and the first
that fits is given: shares pack onto the first GPUs, whole ones stay free
for whole-GPU jobs. A job short of a share reserves the token with the
most free of it.
"""

from __future__ import annotations

import re
from sloth_daemon.daemon.which import which as path_which
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from sloth_daemon.checks import GPU_MEM, MILLI, share_milli
from sloth_daemon.errors import BadRequest

Tokens = dict[str, list[str]]
Free = dict[str, dict[str, int]]  # resource -> token -> milli-shares free, in the preferred order
Unfit = Callable[[str, str], "str | None"]  # (resource, token) -> why it may not be given now (daemon/gpus.py)
GPU = "gpu"
WHOLE = MILLI


@dataclass(frozen=True)
class Want:
    """What a job takes of one resource: ``count`` tokens, ``milli`` of each."""

    count: int
    milli: int


def split_token(held: str) -> tuple[str, int]:
    """``"0@500"`` -> ("0", 500); ``"0"`` -> ("0", 1000)."""
    tok, sep, milli = held.rpartition("@")
    if sep and milli.isdigit() and 0 < int(milli) <= WHOLE:
        return tok, int(milli)
    return held, WHOLE


def held_token(tok: str, milli: int) -> str:
    return tok if milli >= WHOLE else f"{tok}@{milli}"


def parse_nvidia_smi(text: str) -> list[str]:
    """``GPU 0: NVIDIA A100 (UUID: GPU-...)`` lines -> ["0", ...]."""
    return [m.group(1) for m in re.finditer(r"^GPU (\d+):", text, re.MULTILINE)]


def found_gpus(run: Callable[[Sequence[str]], str] | None = None,
               which: Callable[[str], str | None] = path_which) -> list[str]:
    """The GPUs nvidia-smi lists ([] without it, or when it fails)."""
    if which("nvidia-smi") is None:
        return []
    try:
        out = (run or _run)(["nvidia-smi", "-L"])
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_nvidia_smi(out)


def _run(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=5, check=True,
                          stdin=subprocess.DEVNULL).stdout


class Resources:
    """This machine's tokens of each resource (``tokens``, in the preferred
    order), each one's share count, and the rules of giving them out. No
    state of its own beyond that: what is in use is passed in (the tokens
    of the runs the worker holds)."""

    def __init__(self, configured: Mapping[str, Sequence[str]], *,
                 shares: Mapping[str, int] | None = None, order: Mapping[str, Sequence[str]] | None = None,
                 detect: Callable[[], list[str]] = found_gpus) -> None:
        self.tokens: dict[str, list[str]] = {k: list(v) for k, v in configured.items()}
        self.source = {k: "config" for k in configured}
        self.shares = dict(shares or {})
        if GPU not in self.tokens:
            gpus = detect()
            if gpus:
                self.tokens[GPU], self.source[GPU] = gpus, "nvidia-smi -L"
        for name, first in (order or {}).items():  # the preferred order: these first, the rest as they were
            toks = self.tokens.get(name, [])
            self.tokens[name] = [t for t in first if t in toks] + [t for t in toks if t not in first]

    def check(self, needs: Mapping[str, int]) -> None:
        """Raises BadRequest for needs this machine can never meet."""
        err = self.never(needs)
        if err is not None:
            raise err

    def never(self, needs: Mapping[str, int], where: str = "this machine") -> BadRequest | None:
        """Why ``needs`` can never be met by these tokens (None: they can,
        once enough are free). ``where``: the machine they are, as said."""
        return never_met(self.counts(), needs, where)

    def counts(self) -> dict[str, int]:
        """How many tokens of each resource (what a machine publishes on a shared queue)."""
        return {name: len(toks) for name, toks in self.tokens.items()}

    def wants(self, gate: Mapping[str, object] | None) -> dict[str, Want]:
        """What a job of ``gate`` takes of each resource here: a share it
        names, else its count of tokens at this machine's share of each."""
        out = {}
        needs = _needs(gate)
        if GPU_MEM in needs and GPU not in needs:  # one GPU shared by memory alone: the least share of it
            out[GPU] = Want(1, 1)
        for name, n in needs.items():
            if name == GPU_MEM:
                continue
            milli = share_milli(n)
            out[name] = Want(1, milli) if milli is not None else Want(int(n), WHOLE // max(1, self.shares.get(name, 1)))
        return out

    def free(self, in_use: Iterable[Tokens]) -> Free:
        """Each resource's tokens and the milli-shares no run holds of each, in the preferred order."""
        out = {name: {t: WHOLE for t in toks} for name, toks in self.tokens.items()}
        for h in in_use:
            for name, held in h.items():
                have = out.get(name, {})
                for tok, milli in map(split_token, held):
                    if tok in have:
                        have[tok] = max(0, have[tok] - milli)
        return out

    @staticmethod
    def take(wants: Mapping[str, Want], free: Free, unfit: Unfit | None = None) -> Tokens | None:
        """The tokens for ``wants`` out of ``free`` (taken out of it): the
        first in order that have the share and are not ``unfit``; or None if
        any is short: then the tokens that would come free first for it (the
        most free of them) are reserved for it (taken out of ``free`` too:
        the rule in the module docstring)."""
        picks: dict[str, list[str]] = {}
        short = False
        for name, w in wants.items():
            fit = [t for t in free.get(name, {}) if unfit is None or unfit(name, t) is None]
            picks[name] = [t for t in fit if free[name][t] >= w.milli][:w.count]
            if len(picks[name]) < w.count:
                short = True
                picks[name] = sorted((t for t in fit if free[name][t] > 0), key=lambda t: -free[name][t])[:w.count]
        got: Tokens = {}
        for name, toks in picks.items():
            w = wants[name]
            for t in toks:
                if short:
                    del free[name][t]
                else:
                    free[name][t] -= w.milli
            got[name] = [held_token(t, w.milli) for t in toks]
        return None if short else got

    def shortage(self, wants: Mapping[str, Want], free: Free, idle: Free | None = None,
                 unfit: Unfit | None = None) -> str:
        """Why ``wants`` cannot start now ("waiting for gpu: 2 wanted, 1 of
        2 free"); ``idle``: what no run holds, of which what is not in
        ``free`` is kept for a job before it (the rule), and said so;
        ``unfit``: why a token may not be given (said after)."""
        parts = []
        for name, w in wants.items():
            have = free.get(name, {})
            ok = [t for t, m in have.items() if m >= w.milli]
            why = [u for u in (unfit(name, t) for t in ok) if u] if unfit else []
            if len(ok) - len(why) >= w.count:
                continue
            total = len(self.tokens.get(name, []))
            kept_n = len([t for t, m in (idle or {}).get(name, {}).items() if m >= w.milli]) - len(ok)
            kept = f" ({kept_n} kept for a job before it)" if kept_n > 0 else ""
            fit = f"{len(ok) - len(why)} of {total} fit" if why else f"{len(ok)} of {total} free"
            if w.milli == WHOLE:
                text = f"{name}: {w.count} wanted, {fit}{kept}"
            elif w.milli == 1:  # gpu-mem alone: memory is what it waits for
                text = f"{name}: 1 wanted, {fit}{kept}"
            else:
                text = f"{name}: a {w.milli / WHOLE:g} share wanted, {fit if why else f'{len(ok)} of {total}'}" \
                       f" with that free{kept}"
            parts += [*why, text]  # why first: what a person can act on, and what `ls` has room for
        return "waiting for " + "; ".join(parts) if parts else "waiting for resources"

    def status(self, in_use: Iterable[Tokens]) -> dict[str, dict[str, object]]:
        free = self.free(list(in_use))
        return {name: {"tokens": toks, "free": [t for t in toks if free[name][t] >= WHOLE],
                       "source": self.source.get(name, "config"),
                       **({"shares": self.shares.get(name, 1), "free_milli": free[name]} if self.shares.get(name, 1) > 1
                          or any(m < WHOLE for m in free[name].values()) else {})}
                for name, toks in sorted(self.tokens.items())}


def resources_of(settings: Any, detect: Callable[[], list[str]] = found_gpus) -> Resources:
    """This machine's resources as ``settings`` (config.Settings) say, with each one's shares and order."""
    opts = settings.resource_opts
    return Resources(settings.resources, shares={k: v["shares"] for k, v in opts.items() if "shares" in v},
                     order={k: v["order"] for k, v in opts.items() if "order" in v}, detect=detect)


def environment(tokens: Tokens | None) -> dict[str, str]:
    """What a run holding ``tokens`` finds in its environment."""
    env: dict[str, str] = {}
    for name, held in (tokens or {}).items():
        toks = [split_token(t)[0] for t in held]
        env[f"SLOTH_{name.upper()}"] = ",".join(toks)
        if name == GPU:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(toks)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA numbers GPUs as nvidia-smi does (fastest first otherwise)
            shares = [split_token(t)[1] for t in held]
            if any(m < WHOLE for m in shares):
                env["SLOTH_GPU_SHARE"] = ",".join(f"{m / WHOLE:g}" for m in shares)
    return env


def _needs(gate: Mapping[str, object] | None) -> dict[str, int | float]:
    needs = (gate or {}).get("needs") or {}
    if not isinstance(needs, dict):
        raise BadRequest("a job's stored needs are not an object")
    return needs


def needs_of(gate: Mapping[str, object] | None) -> dict[str, int]:
    """How many tokens of each resource (a share is one token; gpu-mem alone is one gpu)."""
    needs = _needs(gate)
    out = {str(k): 1 if share_milli(v) is not None else int(v) for k, v in needs.items() if k != GPU_MEM}
    return {GPU: 1, **out} if GPU_MEM in needs else out


def gpu_mem_of(gate: Mapping[str, object] | None) -> int | None:
    """``--needs gpu-mem``: bytes of GPU memory free on each GPU it is given."""
    v = _needs(gate).get(GPU_MEM)
    return int(v) if v else None


def never_met(counts: Mapping[str, int], needs: Mapping[str, int], where: str) -> BadRequest | None:
    """Why ``needs`` can never be met by a machine with ``counts`` tokens of
    each resource (None: they can, once enough are free); ``where``: that
    machine, as said. Judged on the counts alone, never a token list made
    of them: another machine's published count may be any number."""
    for name, n in needs.items():
        have = counts.get(name)
        if have is None:
            known = ", ".join(f"{k} ({v})" for k, v in sorted(counts.items())) or "none"
            return BadRequest(f"--needs {name}={n}: {where} has no resource {name!r} (it has: {known})",
                              hint=f"Name it in config.toml: [resources] {name} = N (or a list of token names),"
                                   " then `sloth daemon reload`.")
        if n > have:
            return BadRequest(f"--needs {name}={n}: {where} has {have} {name} token(s)",
                              hint=f"Ask for at most {have}, or add tokens under [resources].")
    return None
