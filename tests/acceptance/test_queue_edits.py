"""Issue 22 item 8, the queue edits, through the real CLI and a real daemon:
jobs edited, bumped, held and released run in the order asked; an editor
session that a claim overtakes edits nothing; edits racing claims never
change a job that started; bad input is refused with nothing changed."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sloth_daemon.errors import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_USAGE, SlothError
from tests.acceptance.test_cli import one_error
from tests.support.harness import Harness

pytestmark = pytest.mark.acceptance


def add(h: Harness, *args: str) -> int:
    return h.cli_json("add", *args)["ids"][0]


def kinds(h: Harness, jid: int) -> list[str]:
    return [e["kind"] for e in h.events(jid)]


def lines(p: Path) -> list[str]:
    return p.read_text().split() if p.exists() else []


def test_jobs_edited_bumped_held_and_released_run_in_the_order_asked(harness):
    h = harness
    h.start()
    out = h.home / "order.txt"
    h.cli("lane", "set", "work", "-c", "1", "--create", check=True)
    h.cli("pause", "work", check=True)
    a, b, c, d = (add(h, "--lane", "work", "--shell", "--", f"echo {n} >> {out}") for n in "abcd")
    e = h.cli_json("add", "--lane", "work", "--hold", "--stdin", input=f"echo e >> {out}\n")["ids"][0]

    p = h.cli("edit", str(c), "--priority", "5", check=True)  # c first ...
    assert p.stdout == f"job {c} edited: priority 0 -> 5\n"
    res = h.cli_json("bump", str(d))  # ... then d before it
    assert res["jobs"][0]["priority"] == 6 and res["skipped"] == []
    assert h.cli("hold", str(b), check=True).stdout == f"job {b} held\n"
    p = h.cli("edit", str(a), "--command", f"echo a2 >> {out}", check=True)
    assert "command" in p.stdout and "a2" in p.stdout

    ls = h.cli("ls", "--lane", "work", check=True).stdout
    assert [str(b), "held", "work"] in [row.split()[:3] for row in ls.splitlines()]
    assert "until released" in ls
    held = h.cli_json("ls", "--state", "held")
    assert sorted(j["id"] for j in held["jobs"]) == [b, e] and held["counts"]["held"] == 2

    h.cli("resume", "work", check=True)
    for j in (a, c, d):
        h.wait_state(j, "done")
    assert lines(out) == ["d", "c", "a2"]
    assert h.job(b)["state"] == "held" and h.job(e)["state"] == "held"  # never claimed while held

    p = h.cli("release", str(e), str(b), check=True)
    assert p.stdout == f"job {e} released: queued\njob {b} released: queued\n"
    h.wait_state(b, "done")
    h.wait_state(e, "done")
    assert lines(out) == ["d", "c", "a2", "b", "e"]  # b before e: it kept its place (id order, same priority)

    assert kinds(h, c)[:2] == ["edited", "claimed"]
    edited = [ev for ev in h.events(a) if ev["kind"] == "edited"]
    assert len(edited) == 1 and edited[0]["message"].startswith("edited: command ")
    assert "bumped" in kinds(h, d) and kinds(h, b)[:2] == ["held", "released"]
    assert kinds(h, e)[0] == "held" and h.events(e)[0]["message"] == "added held: not claimed until `sloth release`"


EDITOR = textwrap.dedent("""\
    import json, subprocess, sys, time
    jid, path = sys.argv[1], sys.argv[2]
    sloth = [sys.executable, "-m", "sloth_daemon"]
    subprocess.run(sloth + ["resume", "work"], check=True, capture_output=True)
    deadline = time.monotonic() + 30
    while json.loads(subprocess.run(sloth + ["show", jid, "--json"], capture_output=True, check=True,
                                    text=True).stdout)["jobs"][0]["state"] != "running":
        assert time.monotonic() < deadline, "never claimed"
        time.sleep(0.05)
    with open(path, "w") as f:
        f.write("echo edited\\n")
""")


def test_a_claim_that_overtakes_an_editor_session_wins(harness):
    """The job is claimed while its command is open in the editor: the edit
    the editor saves is refused (the job as read no longer is), nothing changes."""
    h = harness
    h.start()
    h.cli("lane", "set", "work", "-c", "1", "--create", check=True)
    h.cli("pause", "work", check=True)
    jid = add(h, "--lane", "work", "--", "sleep", "3")
    script = h.home / "editor.py"
    script.write_text(EDITOR)
    h.env["EDITOR"] = f"{sys.executable} {script} {jid}"
    try:
        p = h.cli("edit", str(jid))
    finally:
        del h.env["EDITOR"]
    assert p.returncode == EXIT_CONFLICT, p.stderr
    one_error(p, f"job {jid} is running")
    assert "sloth restart" in p.stderr
    job = h.job(jid)
    assert job["command"] == ["sleep", "3"] and "edited" not in kinds(h, jid)
    h.cli("cancel", str(jid), check=True)


def test_edits_racing_claims_never_change_a_job_that_started(harness):
    """Edits sent while the daemon claims: each either lands before the claim
    (and the run is the edited command) or is refused (and the run is the old one)."""
    h = harness
    h.start()
    h.call("pause")
    n = 40
    ids = h.add_many([{"command": ["echo", "old"]} for _ in range(n)])
    answers: dict[int, object] = {}

    def edit_all() -> None:
        for jid in ids:
            try:
                answers[jid] = h.call("edit", id=jid, changes={"command": ["echo", "new"]},
                                      expect={"state": "queued", "attempts": 0})
            except SlothError as e:
                answers[jid] = e

    t = threading.Thread(target=edit_all)
    t.start()
    h.wait_for(lambda: len(answers) >= 3, what="the first edits")  # these land before any claim ...
    h.call("resume")  # ... the rest race the claims
    t.join(60)
    for jid in ids:
        h.wait_state(jid, "done")
    edited = refused = 0
    for jid in ids:
        log = Path(h.call("logs", id=jid)["path"]).read_text().strip()
        ans = answers[jid]
        if isinstance(ans, SlothError):
            refused += 1
            assert ans.exit_code == EXIT_CONFLICT and ("is running" in ans.message or "is done" in ans.message
                                                       or "changed while" in ans.message), ans.message
            assert log == "old" and h.job(jid)["command"] == ["echo", "old"]
        else:
            edited += 1
            assert log == "new" and h.job(jid)["command"] == ["echo", "new"]
    assert edited + refused == n and edited >= 3


def test_editor_that_fails_or_leaves_the_file_empty_or_unchanged_changes_nothing(harness):
    h = harness
    h.start()
    h.call("pause")
    jid = add(h, "--", "echo", "hello world")
    before = h.call("show", id=jid)
    cases = {"false": (1, "exited with status 1"), "true": (0, "left as it was"),
             "truncate -s 0": (1, "left empty")}
    for editor, (rc, words) in cases.items():
        h.env["VISUAL"] = editor
        p = h.cli("edit", str(jid))
        assert p.returncode == rc and words in p.stderr, (editor, p.stderr)
        assert "Traceback" not in p.stderr
    assert h.call("show", id=jid) == before
    h.env["VISUAL"] = "sed -i s/hello/bye/"
    p = h.cli("edit", str(jid), check=True)
    del h.env["VISUAL"]
    assert p.stdout == f"""job {jid} edited: command "echo 'hello world'" -> "echo 'bye world'"\n"""
    assert h.job(jid)["command"] == ["/bin/sh", "-c", "echo 'bye world'"]


def test_bad_edits_are_refused_and_change_nothing(harness):
    h = harness
    h.start()
    h.call("pause")
    a = add(h, "--", "true")
    b = add(h, "--after", str(a), "--", "true")
    before = h.call("list")["jobs"]
    for args, code, words in [
        (("edit", "99", "-p", "1"), EXIT_NOT_FOUND, "no job with id 99"),
        (("edit", str(a), "--after", str(b)), EXIT_USAGE, f"job {b} waits for job {a}"),
        (("edit", str(a), "--after", "99"), EXIT_NOT_FOUND, "99"),
        (("edit", str(a), "--delay", "soon"), EXIT_USAGE, ""),
        (("edit", str(a), "--command", "   "), EXIT_USAGE, "empty"),
        (("edit", str(a), "--command", "x", "--", "y"), EXIT_USAGE, "not both"),
        (("edit", str(a), "--lane", ""), EXIT_USAGE, "lane"),
        (("bump", "99"), EXIT_NOT_FOUND, "99"),
        (("hold",), EXIT_USAGE, "which jobs"),
        (("hold", "--lane", "nosuch"), EXIT_NOT_FOUND, "nosuch"),
        (("release", str(a), "--lane", "default"), EXIT_USAGE, "not both"),
    ]:
        p = h.cli(*args)
        assert p.returncode == code, (args, p.returncode, p.stderr)
        if words:
            one_error(p, words)
    p = h.cli("edit", str(a), "-p", "x")
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr
    for frame in ({"id": a}, {"id": a, "changes": []}, {"id": "1", "changes": {"priority": 1}},
                  {"id": a, "changes": {"priority": 1}, "expect": "x"}, {"id": a, "changes": {"command": "x"}}):
        with pytest.raises(SlothError):
            h.call("edit", **frame)
    for op, frame in (("bump", {"ids": "1"}), ("bump", {"ids": []}), ("hold", {"lane": 5}),
                      ("hold", {"ids": [a], "lane": "default"}), ("release", {}), ("release", {"ids": [True]})):
        with pytest.raises(SlothError):
            h.call(op, **frame)
    assert h.call("list")["jobs"] == before
    assert h.call("ping")["pong"]


def test_running_jobs_are_refused_and_a_lane_selection_takes_only_what_applies(harness):
    h = harness
    h.start()
    h.cli("lane", "set", "v", "-c", "1", "--create", check=True)
    run = add(h, "--lane", "v", "--", "sleep", "30")
    h.wait_state(run, "running")
    q1 = add(h, "--lane", "v", "--", "true")
    q2 = add(h, "--lane", "v", "--", "true")
    p = h.cli("edit", str(run), "--priority", "3")
    assert p.returncode == EXIT_CONFLICT
    one_error(p, f"job {run} is running")
    assert f"sloth restart {run}" in p.stderr
    p = h.cli("hold", "--lane", "v")
    assert p.returncode == 0 and p.stderr == "" and p.stdout == f"job {q1} held\njob {q2} held\n"
    assert h.job(run)["state"] == "running"
    p = h.cli("hold", str(run), str(q1))
    assert p.returncode == EXIT_CONFLICT and f"job {run} left alone" in p.stderr and f"job {q1} held" in p.stdout
    res = h.cli_json("release", "--lane", "v")
    assert [j["id"] for j in res["jobs"]] == [q1, q2] and {j["state"] for j in res["jobs"]} == {"queued"}
    p = h.cli("release", "--lane", "v")
    assert p.returncode == 0 and "nothing held" in p.stderr
    res = h.cli_json("edit", str(q2), "--priority", "2", "--label", "two")
    assert res["changed"] and res["changes"] == ["priority 0 -> 2", "label (none) -> two"]
    assert json.loads(json.dumps(res["job"]))["priority"] == 2
    h.cli("cancel", str(run), str(q1), str(q2), check=True)


def test_an_edited_command_that_sh_cannot_read_is_refused(harness):
    """The new command (--command or from the editor) is a line of `add
    --stdin`: checked with sh -n before it is sent; nothing changes."""
    h = harness
    h.start()
    h.call("pause")
    jid = add(h, "--", "echo", "hello")
    before = h.call("show", id=jid)
    p = h.cli("edit", str(jid), "--command", 'echo "two')
    assert p.returncode == EXIT_USAGE, p.stderr
    one_error(p, "echo \"two", "Unterminated quoted string")
    h.env["VISUAL"] = "sed -i '1s/hello/(/'"
    try:
        p = h.cli("edit", str(jid))
    finally:
        del h.env["VISUAL"]
    assert p.returncode == EXIT_USAGE, p.stderr
    one_error(p, "echo (")
    assert h.call("show", id=jid) == before


def test_what_an_edit_says_cannot_break_the_terminal(harness):
    """A label (or lane) with a newline or an escape sequence is echoed
    escaped, on one line, as ls shows it."""
    h = harness
    h.start()
    h.call("pause")
    jid = add(h, "--", "true")
    p = h.cli("edit", str(jid), "--label", "a\nb\x1b[2J", check=True)
    assert p.stdout.count("\n") == 1 and "\x1b" not in p.stdout, repr(p.stdout)
    assert "a\\nb\\x1b[2J" in p.stdout
    assert h.job(jid)["label"] == "a\nb\x1b[2J"


def test_edit_changes_a_waiting_jobs_watchdogs_and_retry_rules(harness):
    """`sloth edit ID --stall 20m` (and --fail-on, --retry-on, --backoff) was
    refused as an unknown option: a job queued behind a long one could not
    be given the watchdog its user forgot. One rule changed keeps the others."""
    h = harness
    h.start()
    h.call("pause")
    a = add(h, "--fail-on", "loss: nan", "--", "true")
    p = h.cli("edit", str(a), "--stall", "20m", "--backoff", "5s..10m", check=True)
    assert "stall (none) -> 20m" in p.stdout and "backoff (none) -> 5s" in p.stdout, p.stdout
    (job,) = h.cli_json("show", str(a))["jobs"]
    assert job["rules"] == {"fail_on": "loss: nan", "stall_s": 1200.0, "backoff_s": 5.0, "backoff_cap_s": 600.0}
    p = h.cli("edit", str(a), "--fail-on", "(")
    assert p.returncode == EXIT_USAGE and "--fail-on" in p.stderr, p.stderr
    assert h.cli_json("show", str(a))["jobs"][0]["rules"] == job["rules"]


def test_edit_backoff_gives_its_base_and_cap_together_as_add_does(harness):
    """`--backoff BASE` is the base with the default cap (`sloth add`); an
    edit's `--backoff 20s` of a job queued with `--backoff 1s..10s` kept the
    old 10s cap beside it and was refused by the daemon, naming its field
    ("backoff_s the base (20s) is longer than the cap (10s)"), and a smaller
    base kept a cap nobody gave with it. The other rules stay as they were."""
    h = harness
    h.start()
    h.call("pause")
    a = add(h, "--backoff", "1s..10s", "--stall", "1m", "--", "true")
    p = h.cli("edit", str(a), "--backoff", "20s")
    assert p.returncode == 0, p.stderr
    assert h.cli_json("show", str(a))["jobs"][0]["rules"] == {"backoff_s": 20.0, "stall_s": 60.0}
    h.cli("edit", str(a), "--backoff", "2s..1m", check=True)
    assert h.cli_json("show", str(a))["jobs"][0]["rules"] == {"backoff_s": 2.0, "backoff_cap_s": 60.0, "stall_s": 60.0}
    h.cli("schedule", "add", "s", "--every", "1d", "--backoff", "1s..10s", "--stall", "1m", "--", "true", check=True)
    p = h.cli("schedule", "edit", "s", "--backoff", "20s")
    assert p.returncode == 0, p.stderr
    assert h.cli_json("schedule", "show", "s")["schedule"]["job_options"]["rules"] == {"backoff_s": 20.0,
                                                                                       "stall_s": 60.0}


def test_an_edit_the_daemon_refuses_is_named_as_its_option_and_says_nothing_changed(harness):
    """What only the daemon can check (the job with the edit over it: a
    --retry-on its --no-retry-on names, a bound) came back named as the
    queue's field ("max_attempts must be at least 1", "retry_on names mem
    ..."), not as the option typed, and without saying the job is as it was."""
    h = harness
    h.start()
    h.call("pause")
    a = add(h, "--no-retry-on", "mem", "--", "true")
    before = h.cli_json("show", str(a))["jobs"][0]
    for args, option in ((["--retry-on", "mem"], "--retry-on"), (["--max-attempts", "0"], "--max-attempts"),
                         (["--lease", "1ms"], "--lease")):
        p = h.cli("edit", str(a), *args)
        assert p.returncode == EXIT_USAGE, p.stderr
        assert p.stderr.startswith(f"sloth: error: {option} ") and f"; job {a} was not changed" in p.stderr, p.stderr
    assert h.cli_json("show", str(a))["jobs"][0]["rules"] == before["rules"]
    h.cli("schedule", "add", "s", "--every", "1d", "--no-retry-on", "mem", "--", "true", check=True)
    p = h.cli("schedule", "edit", "s", "--retry-on", "mem")
    assert p.returncode == EXIT_USAGE, p.stderr
    assert p.stderr.startswith("sloth: error: --retry-on ") and "; the schedule was not changed" in p.stderr, p.stderr
    assert "of the batch" not in p.stderr, p.stderr  # a schedule's job is no batch's
