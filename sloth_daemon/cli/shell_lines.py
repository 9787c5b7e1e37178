"""Turn one line of `sloth add --stdin` into a job.

A line is a shell command, so in general it runs as ``/bin/sh -c LINE``. But
a plain line (words of ordinary characters, no quoting, expansion,
redirection, globbing, comment or assignment, not a shell builtin or
keyword) means exactly what its whitespace-split words mean, so it is run
directly: one exec instead of two, which halves the cost of a trivial job.
"""

from __future__ import annotations

import re
from typing import Any

# Characters that mean nothing special to sh anywhere in a word ('=' only
# matters in the first word, where it would be an assignment).
_FIRST = r"[A-Za-z0-9_@%+,./:-]+"
_REST = r"[A-Za-z0-9_@%+=,./:-]+"
_PLAIN = re.compile(rf"[ \t]*{_FIRST}(?:[ \t]+{_REST})*[ \t]*")

# Builtins with no program of the same name (or that act on the shell
# itself), and reserved words: these need the shell.
SHELL_ONLY = frozenset("""
    . : ! { } [[ ]] alias bg break case cd command continue do done elif else esac eval exec exit
    export fc fg fi for function getopts hash if in jobs local read readonly return select set
    shift source then time times trap type typeset ulimit umask unalias unset until wait while
""".split())


def is_plain(line: str) -> bool:
    return bool(_PLAIN.fullmatch(line)) and line.split()[0] not in SHELL_ONLY


def line_job(line: str) -> dict[str, Any]:
    if is_plain(line):
        return {"command": line.split()}
    return {"command": ["/bin/sh", "-c", line], "shell": True}
