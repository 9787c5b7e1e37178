"""`sloth top`'s failures grouped by signature (cli/top/signatures.py)."""

from __future__ import annotations

from sloth_daemon.cli.top.signatures import group, normalise


def test_paths_and_numbers_are_taken_out():
    assert normalise("disk full writing /tmp/a/1.dat after 12 s") == "disk full writing <path> after <n> s"
    assert normalise("  error  in ./src/x.py line 42  ") == "error in <path> line <n>"
    assert normalise("Killed pid 4711 (0x1f3a) at 03:12:55.120") == "Killed pid <n> (<n>) at <n>"
    assert normalise("file=~/data/run-3.csv: bad") == "file=<path>: bad"
    assert normalise("see src/sloth/x.py") == "see <path>"
    assert normalise("no numbers here") == "no numbers here"


def test_words_with_digits_that_are_not_numbers_stay_distinct_enough():
    # "v2" and "utf8" keep their letters: two different messages stay two signatures
    assert normalise("python3 failed") != normalise("python failed")


def test_a_long_line_is_capped():
    assert len(normalise("x" * 10_000)) == 200


def _job(jid: int, code: int | None, at: float) -> dict:
    return {"id": jid, "exit_code": code, "finished_at": at}


def test_failures_that_differ_only_in_paths_and_numbers_are_one_group_largest_first():
    groups = group([
        (_job(1, 1, 10.0), "disk full writing /tmp/a/1.dat after 12 s"),
        (_job(2, 1, 30.0), "disk full writing /tmp/b/7.dat after 3 s"),
        (_job(3, 2, 40.0), "disk full writing /tmp/c after 3 s"),  # another exit code: another group
        (_job(4, 1, 20.0), "connection refused"),
        (_job(5, 1, 25.0), "disk full writing /var/x.dat after 99 s"),
    ])
    assert [(g.exit_code, g.line, g.count) for g in groups] == [
        (1, "disk full writing <path> after <n> s", 3),
        (2, "disk full writing <path> after <n> s", 1),  # as large as the next; the newer first
        (1, "connection refused", 1),
    ]
    first = groups[0]
    assert first.ids == [1, 2, 5] and first.last_at == 30.0
    assert first.example == "disk full writing /tmp/b/7.dat after 3 s"  # the newest one's own words
    assert first.text() == "exit 1: disk full writing <path> after <n> s"


def test_a_failure_that_printed_nothing_says_so():
    (g,) = group([(_job(1, None, 1.0), "")])
    assert g.text() == "exit ? (printed nothing)"
