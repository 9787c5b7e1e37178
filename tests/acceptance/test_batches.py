"""Issue 33, items 1 and 2: batches with a handle, arrays and sweeps,
through the real CLI and the real daemon, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import os

import pytest

from sloth_daemon.errors import EXIT_JOB_FAILED, EXIT_NOT_FOUND, EXIT_USAGE
from tests.support.harness import on_one_queue

pytestmark = pytest.mark.acceptance


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sloth(request, make_harness):
    """A started daemon on a SQLite file, or on a real PostgreSQL queue."""
    if request.param == "sqlite":
        h = make_harness()
        h.start()
        return h
    if os.environ.get("SLOTH_SKIP_PG", "") not in ("", "0"):
        pytest.skip("SLOTH_SKIP_PG is set")
    return on_one_queue(make_harness, request.getfixturevalue("pg_url"), {"a": ""})[0]


def total(h) -> int:
    return sum(h.call("status")["counts"].values())


def test_a_batch_is_waited_on_retried_cancelled_shown_and_listed_by_its_name(sloth):
    p = sloth.cli("add", "--stdin", "--batch", "night", "--max-attempts", "1",
                  input="true\nfalse\nsleep 60\n", check=True)
    ids = [int(x) for x in p.stdout.split()]
    bid = sloth.job(ids[0])["batch"]["id"]
    assert f"batch {bid} 'night': 3 jobs" in p.stderr
    assert all(sloth.job(i)["batch"] == {"id": bid, "name": "night"} for i in ids)
    sloth.wait_state(ids[1], "failed")
    sloth.wait_state(ids[2], "running")
    shown = sloth.cli_json("show", "--batch", "night")["batch"]
    assert shown["counts"] == {"done": 1, "failed": 1, "running": 1} and shown["total"] == 3
    assert f"batch    {bid} 'night': 3 jobs: 1 done, 1 failed, 1 running" in sloth.cli("status", check=True).stdout
    # cancel --batch: its unfinished jobs only (the finished ones are not "left alone")
    p = sloth.cli("cancel", "--batch", "night", check=True)
    assert p.stdout.split("\n")[0] == f"job {ids[2]} cancelled" and p.stderr == ""
    # wait --batch: one line, exit 5 when not all are done
    p = sloth.cli("wait", "--batch", "night")
    assert p.returncode == EXIT_JOB_FAILED
    assert p.stdout == f"batch {bid} 'night': 3 jobs: 1 done, 1 failed, 1 cancelled\n"
    # retry --batch: its failed jobs, not every failed job of the queue
    other = int(sloth.cli("add", "--max-attempts", "1", "--", "false", check=True).stdout)
    sloth.wait_state(other, "failed")
    p = sloth.cli("retry", "--batch", str(bid), check=True)
    assert p.stdout == f"job {ids[1]} queued again\n"
    assert sloth.job(other)["state"] == "failed"
    listed = sloth.cli_json("ls", "--batch", "night")["jobs"]
    assert sorted(j["id"] for j in listed) == ids
    sloth.wait_state(ids[1], "failed")  # its retry failed too: nothing of the batch is unfinished
    assert "batch " not in sloth.cli("status", check=True).stdout


def test_a_name_means_its_newest_batch_and_an_unknown_one_changes_nothing(sloth):
    first = sloth.cli_json("add", "--batch", "b1", "--hold", "--", "true")
    second = sloth.cli_json("add", "--batch", "b1", "--hold", "--", "true")
    assert first["batch"]["id"] != second["batch"]["id"] and second["batch"]["name"] == "b1"
    shown = sloth.cli_json("show", "--batch", "b1")
    assert shown["ids"] == second["ids"] and shown["batch"]["same_name"] == 2
    assert sloth.cli_json("show", "--batch", str(first["batch"]["id"]))["ids"] == first["ids"]  # older: by id
    for cmd in ("show", "wait", "cancel", "retry", "ls"):
        p = sloth.cli(cmd, "--batch", "nope")
        assert p.returncode == EXIT_NOT_FOUND and "no batch named 'nope'" in p.stderr, (cmd, p.stderr)
    p = sloth.cli("add", "--batch", "42", "--", "true")
    assert p.returncode == EXIT_USAGE and "cannot be all digits" in p.stderr and total(sloth) == 2
    for ref, said in (("9" * 30, "no batch with id"), ("9" * 5000, "no batch with id"), ("\u0663", "no batch named")):
        p = sloth.cli("show", "--batch", ref)  # more digits than an id has were an internal error in batch_show;
        assert p.returncode == EXIT_NOT_FOUND and said in p.stderr, p.stderr  # an Arabic-Indic 3 meant batch 3
    assert sloth.cli_json("add", "--batch", "\u0663", "--hold", "--", "true")["batch"]["name"] == "\u0663"
    p = sloth.cli("cancel", "--batch", "b1", "7")
    assert p.returncode == EXIT_USAGE
    assert sloth.job(second["ids"][0])["state"] == "held"


def test_a_grid_makes_one_job_per_combination_with_its_values_in_the_command_and_the_environment(sloth):
    out = sloth.home / "out"
    out.mkdir()
    p = sloth.cli("add", "--shell", "--grid", "lr=0.1,0.01", "bs=32,64", "--",
                  'echo {lr} {bs} {#} "$SLOTH_ARG_LR" "$SLOTH_ARG_BS" "$SLOTH_ARRAY_INDEX" "$SLOTH_ARRAY_VALUE" {{}}'
                  " > out/{#}", check=True)
    ids = [int(x) for x in p.stdout.split()]
    assert len(ids) == 4 and "4 jobs" in p.stderr
    p = sloth.cli("wait", "--batch", str(sloth.job(ids[0])["batch"]["id"]), check=True)
    assert p.stdout.endswith("4 jobs: 4 done\n")
    got = [(out / str(i)).read_text() for i in range(1, 5)]
    assert got == ["0.1 32 1 0.1 32 1 0.1 32 {}\n", "0.1 64 2 0.1 64 2 0.1 64 {}\n",
                   "0.01 32 3 0.01 32 3 0.01 32 {}\n", "0.01 64 4 0.01 64 4 0.01 64 {}\n"]
    assert sloth.job(ids[3])["member"] == {"index": 4, "value": "0.01 64", "args": {"lr": "0.01", "bs": "64"}}


def test_each_and_range_fill_the_template_or_add_the_value_as_the_last_word(sloth):
    vals = sloth.home / "vals.txt"
    vals.write_text("alpha\n\nbeta gamma\n")
    a = sloth.cli_json("add", "--each", "p 'q r'", "--", "echo")
    b = sloth.cli_json("add", "--each-file", str(vals), "--", "echo", "[{}]", "#{#}")
    c = sloth.cli_json("add", "--range", "0-9:3", "--", "echo", "n={}")
    assert [sloth.job(i)["command"] for i in a["ids"]] == [["echo", "p"], ["echo", "q r"]]
    assert [sloth.job(i)["command"] for i in b["ids"]] == [["echo", "[alpha]", "#1"], ["echo", "[beta gamma]", "#2"]]
    assert [sloth.job(i)["command"][1] for i in c["ids"]] == ["n=0", "n=3", "n=6", "n=9"]
    assert len({a["batch"]["id"], b["batch"]["id"], c["batch"]["id"]}) == 3


@pytest.mark.parametrize("args, said", [
    (["--range", "1-100001", "--", "echo"], "100,001 jobs, over the 100,000"),
    (["--grid", " ".join(f"{n}=0,1,2,3,4,5,6,7,8,9" for n in "abcd") + " e=0,1,2,3,4,5,6,7,8,9,10", "--", "echo"],
     "110,000 jobs, over the 100,000"),
    (["--shell", "--each", "ok 'a b' ')'", "--", "echo {}; echo ( {}"], "member 1 (ok)"),
    (["--range", "9-1", "--", "echo"], "give FIRST-LAST"),
    (["--range", "\u00b2-3", "--", "echo"], "give FIRST-LAST"),  # isdigit() but not int(): was an internal error
    (["--range", "1-" + "9" * 5000, "--", "echo"], "give FIRST-LAST"),  # past int()'s 4,300 digits: likewise
    # inside quotes a value's own quotes are text: echo "{}" with $(touch pwned) ran it (and so did a here-document)
    (["--shell", "--each", "'$(touch pwned)'", "--", 'echo "{}"'], "stands inside quotes"),
    (["--shell", "--each", "'x; touch pwned'", "--", "echo '{}'"], "stands inside quotes"),
    (["--shell", "--grid", "a=1", "--", 'echo "$(echo x)" "{a}"'], "stands inside quotes"),
    (["--shell", "--each", "x", "--", "cat <<E\n{}\nE"], "here-document"),
    # a word read with str.isdigit then int(): '²' passes the one, not the other (internal errors, text.whole_number)
    (["--after", "\u00b2", "--", "echo"], "is not a job id"),
    (["--after", "1" + "0" * 5000, "--", "echo"], "is not a job id"),
    (["--needs", "cpu=\u00b2", "--", "echo"], "give a count"),
    (["--when", "battery>=\u00b2", "--", "echo"], "takes a percentage"),
    (["--each", "a", "--range", "1-2", "--", "echo"], "give one source of values"),
    (["--grid", "lr=", "--", "echo"], "give NAME=V1,V2"),
    (["--each", "a b", "--key", "k", "--", "echo"], "--key applies to one job"),
    (["--grid", "a=1", "b=2", "--shell", "--", "echo"], "quote the grid"),
    (["--each-file", "/dev/zero", "--", "echo"], "over 64 MiB of values"),
    (["--each", "x" * 5000, "--", "echo"], "values are text of at most 4096 characters"),
])
def test_a_bad_array_queues_nothing_and_says_why(sloth, args, said):
    p = sloth.cli("add", *args)
    assert p.returncode == EXIT_USAGE and said in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and total(sloth) == 0


def test_a_value_that_is_bytes_runs_as_those_bytes_and_one_no_variable_can_hold_queues_nothing(sloth):
    """--each-file values need not be UTF-8 (they were an internal error of the daemon's commit), and a NUL
    byte, which no environment variable can hold, is refused at add (it was queued and failed at run)."""
    values = sloth.home / "values"
    values.write_bytes(b"a\xffb\n")
    (i,) = sloth.cli_json("add", "--each-file", str(values), "--", "sh", "-c", 'printf %s "$SLOTH_ARRAY_VALUE" > got{#}')["ids"]
    assert sloth.wait_state(i, "done", "failed")["state"] == "done"
    assert (sloth.home / "got1").read_bytes() == b"a\xffb"
    values.write_bytes("page\x0cbreak\r\nline\u2028sep\n\n".encode())  # one value a line, and a line ends at \n only
    got = [sloth.job(i)["command"][-1] for i in sloth.cli_json("add", "--hold", "--each-file", str(values), "--", "echo")["ids"]]
    assert got == ["page\x0cbreak", "line\u2028sep"]
    values.write_bytes(b"ok\na\x00b\n")
    before = total(sloth)
    p = sloth.cli("add", "--each-file", str(values), "--", "echo", "{#}")
    assert p.returncode == EXIT_USAGE and "member 2" in p.stderr and "NUL byte" in p.stderr, p.stderr
    assert total(sloth) == before


def test_a_shell_template_takes_each_value_as_one_quoted_word(sloth):
    """A value never changes the line's grammar: `$(...)` in a value is text, not a command run."""
    ids = sloth.cli_json("add", "--shell", "--each", "'$(touch pwned)' 'a;b'", "--",
                         'echo {} >> said; echo "$(echo {})" >> said')["ids"]  # bare in $(...) inside "...": bare
    for i in ids:
        sloth.wait_state(i, "done")
    assert (sloth.home / "said").read_text() == "$(touch pwned)\n$(touch pwned)\na;b\na;b\n"
    assert not (sloth.home / "pwned").exists()


def test_ten_thousand_members_queue_as_one_batch_past_one_frame(sloth):
    p = sloth.cli("add", "--hold", "--range", "1-10000", "--json", "--", "echo", "a-long-argument-{}-" + "x" * 100,
                  timeout_s=300, check=True)
    res = json.loads(p.stdout)
    assert len(res["ids"]) == 10_000 and total(sloth) == 10_000
    assert sloth.cli_json("show", "--batch", str(res["batch"]["id"]))["batch"]["counts"] == {"held": 10_000}
    p = sloth.cli("cancel", "--batch", str(res["batch"]["id"]), timeout_s=300)
    assert p.returncode == 0 and p.stdout.count("cancelled") == 10_000 and p.stderr == ""


def test_with_no_daemon_status_show_and_ls_read_a_batch_from_the_queue_as_the_daemon_tells_it(sloth):
    """Reading commands read the queue when no daemon runs: a batch's
    status line, `show --batch` and `ls --batch` too, and start none."""
    ids = [int(x) for x in sloth.cli("add", "--stdin", "--batch", "night", "--hold",
                                     input="true\ntrue\n", check=True).stdout.split()]
    bid = sloth.job(ids[0])["batch"]["id"]
    line = f"batch    {bid} 'night': 2 jobs: 2 held"
    running = {"status": sloth.cli_json("status"), "show": sloth.cli_json("show", "--batch", "night"),
               "ls": sorted(j["id"] for j in sloth.cli_json("ls", "--batch", "night")["jobs"])}
    assert line in sloth.cli("status", check=True).stdout
    sloth.stop()
    sloth.env["SLOTH_NO_START"] = "1"
    p = sloth.cli("status", check=True)
    assert line in p.stdout and "no daemon is running" in p.stderr
    assert sloth.cli_json("status")["batches"] == running["status"]["batches"]
    assert sloth.cli_json("show", "--batch", "night") == running["show"]
    assert sorted(j["id"] for j in sloth.cli_json("ls", "--batch", "night")["jobs"]) == running["ls"] == ids
