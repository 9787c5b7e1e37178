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
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Callable, Iterable, Mapping, Sequence

from sloth_daemon.errors import BadRequest

Tokens = dict[str, list[str]]
GPU = "gpu"


def parse_nvidia_smi(text: str) -> list[str]:
    """``GPU 0: NVIDIA A100 (UUID: GPU-...)`` lines -> ["0", ...]."""
    return [m.group(1) for m in re.finditer(r"^GPU (\d+):", text, re.MULTILINE)]


def found_gpus(run: Callable[[Sequence[str]], str] | None = None,
               which: Callable[[str], str | None] = shutil.which) -> list[str]:
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
    """This machine's tokens of each resource (``tokens``), and the rules
    of giving them out. No state of its own beyond that: what is in use is
    passed in (the tokens of the runs the worker holds)."""

    def __init__(self, configured: Mapping[str, Sequence[str]], *,
                 detect: Callable[[], list[str]] = found_gpus) -> None:
        self.tokens: dict[str, list[str]] = {k: list(v) for k, v in configured.items()}
        self.source = {k: "config" for k in configured}
        if GPU not in self.tokens:
            gpus = detect()
            if gpus:
                self.tokens[GPU], self.source[GPU] = gpus, "nvidia-smi -L"

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

    def free(self, in_use: Iterable[Tokens]) -> dict[str, list[str]]:
        """Each resource's tokens no run holds, in the configured order."""
        used: dict[str, set[str]] = {}
        for h in in_use:
            for name, toks in h.items():
                used.setdefault(name, set()).update(toks)
        return {name: [t for t in toks if t not in used.get(name, ())] for name, toks in self.tokens.items()}

    @staticmethod
    def take(needs: Mapping[str, int], free: dict[str, list[str]]) -> Tokens | None:
        """The tokens for ``needs`` out of ``free`` (taken out of it), or None
        if any is short: then what is free of what it needs is reserved for
        it (taken out of ``free`` too: the rule in the module docstring)."""
        short = any(len(free.get(name, [])) < n for name, n in needs.items())
        got: Tokens = {}
        for name, n in needs.items():
            have = free.get(name, [])
            got[name], free[name] = have[:n], have[n:]
        return None if short else got

    def shortage(self, needs: Mapping[str, int], free: Mapping[str, list[str]],
                 idle: Mapping[str, list[str]] | None = None) -> str:
        """Why ``needs`` cannot start now ("waiting for gpu: 2 wanted, 1 of
        2 free"); ``idle``: what no run holds, of which what is not in
        ``free`` is kept for a job before it (the rule), and said so."""
        def kept(name: str) -> str:
            k = len((idle or {}).get(name, [])) - len(free.get(name, []))
            return f" ({k} kept for a job before it)" if k > 0 else ""
        parts = [f"{name}: {n} wanted, {len(free.get(name, []))} of {len(self.tokens.get(name, []))} free{kept(name)}"
                 for name, n in needs.items() if len(free.get(name, [])) < n]
        return "waiting for " + "; ".join(parts) if parts else "waiting for resources"

    def status(self, in_use: Iterable[Tokens]) -> dict[str, dict[str, object]]:
        free = self.free(list(in_use))
        return {name: {"tokens": toks, "free": free[name], "source": self.source.get(name, "config")}
                for name, toks in sorted(self.tokens.items())}


def environment(tokens: Tokens | None) -> dict[str, str]:
    """What a run holding ``tokens`` finds in its environment."""
    env: dict[str, str] = {}
    for name, toks in (tokens or {}).items():
        env[f"SLOTH_{name.upper()}"] = ",".join(toks)
        if name == GPU:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(toks)
    return env


def needs_of(gate: Mapping[str, object] | None) -> dict[str, int]:
    needs = (gate or {}).get("needs") or {}
    if not isinstance(needs, dict):
        raise BadRequest("a job's stored needs are not an object")
    return {str(k): int(v) for k, v in needs.items()}


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
