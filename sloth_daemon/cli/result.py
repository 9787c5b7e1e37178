"""`sloth result ID`: the JSON a job's attempt handed on ($SLOTH_RESULT,
docs/watchdogs.md), printed as JSON (\\u-escaped, ASCII), for a script to read (jq).
Exit 0 with it printed; 1 (nothing printed) when the job has no result from
that attempt; 4 for an unknown job; 2 for an attempt it never had. It asks
the daemon (the ``result`` op), or reads the queue file when none answers.
No Typer."""

from __future__ import annotations

from sloth_daemon import errors
from sloth_daemon.cli.connection import call_or_read
from sloth_daemon.cli.output import echo
from sloth_daemon.cli.values import parse_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional


class NoResult(errors.SlothError):
    code = "no_result"
    exit_code = errors.EXIT_ERROR
    hint = "A job hands one on by writing JSON to the file named in $SLOTH_RESULT (docs/watchdogs.md)."


def result(job_id: str, *, attempt: Optional[int] = None) -> None:
    """Print the result of the job's last attempt (or of ``attempt``)."""
    import json

    jid = parse_id(job_id)
    res = call_or_read("result", id=jid, **({"attempt": attempt} if attempt is not None else {}))
    if not res["found"]:
        raise NoResult(f"job {jid} has no result from attempt {res['attempt']}" if res["attempt"]
                       else f"job {jid} has not run yet")
    # \u-escaped as every --json answer is (emit_json): the terminal's escaping (echo) of a control
    # such as U+009B would print `\x9b`, which is no JSON; ASCII JSON has nothing left for it to escape
    echo(json.dumps(res["result"]))
