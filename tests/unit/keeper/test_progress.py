"""What a run says of its progress, read from its output as the keeper
reads it (chunks cut anywhere) and from its progress file (keeper/progress.py)."""

from __future__ import annotations

import io
import os

import pytest

from sloth_daemon.keeper.progress import ProgressMeter, parse_line


@pytest.mark.parametrize("line, fraction", [
    (b"SLOTH_PROGRESS 0.42", 0.42), (b"SLOTH_PROGRESS 42%", 0.42), (b"  SLOTH_PROGRESS 1", 1.0),
    (b'{"progress": 0.25}', 0.25), (b'{"progress": 0, "msg": "x"}', 0.0),
])
def test_lines_by_both_conventions(line: bytes, fraction: float) -> None:
    got = parse_line(line)
    assert got is not None and got["fraction"] == pytest.approx(fraction) and got["source"] == "line"


@pytest.mark.parametrize("line", [
    b"SLOTH_PROGRESS 1.5", b"SLOTH_PROGRESS -0.1", b"SLOTH_PROGRESS nan", b"SLOTH_PROGRESS", b'{"progress": "x"}',
    b'{"progress": true}', b'{"progress": 2}', b'{"progress": 0.5', b"progress 0.5", b"a 42% b", b"x" * 600,
    # numbers no float holds: each raised OverflowError out of the keeper's reader of every run's output
    b'{"progress": 1' + b"0" * 400 + b"}",
])
def test_what_is_no_progress(line: bytes) -> None:
    assert parse_line(line) is None


def _tqdm_output(**kw: object) -> bytes:
    tqdm = pytest.importorskip("tqdm").tqdm
    buf = io.StringIO()
    bar = tqdm(total=200, file=buf, mininterval=0, **kw)
    bar.update(50)
    bar.refresh()
    return buf.getvalue().encode()


@pytest.mark.parametrize("kw", [{}, {"ascii": True, "desc": "train"}, {"unit": "B", "unit_scale": True}])
def test_real_tqdm_bars(kw: dict[str, object]) -> None:
    m = ProgressMeter()
    assert m.feed(_tqdm_output(**kw) + b"\n")
    assert m.latest is not None and m.latest["source"] == "tqdm"
    assert m.latest["fraction"] == pytest.approx(0.25)


def test_a_tqdm_bar_counts_as_soon_as_it_is_whole_not_when_the_next_one_ends_it() -> None:
    # tqdm writes "\r" before each redraw: the bar it drew last is ended only by the next, which may come
    # seconds later (or never): a bar that reached its closing "]" is whole, one cut before it is not yet
    m = ProgressMeter()
    assert m.feed(b"\r  0%|          | 0/40 [00:00<?, ?it/s]")
    assert m.latest is not None and m.latest["fraction"] == 0.0
    bar = "\r 25%|\u2588\u2588\u258c       | 10/40 [00:00<00:00, 9.99it/s]".encode()
    m.feed(bar[:-12])  # cut inside its rate: not whole yet (its "\r" ends the 0% bar, said again)
    assert m.latest["fraction"] == 0.0
    assert m.feed(bar[-12:])
    assert m.latest["fraction"] == pytest.approx(0.25)
    assert _tqdm_output().rstrip().endswith(b"]")  # real tqdm's bars end so


def test_a_tqdm_bar_that_knows_no_total_is_no_fraction() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    buf = io.StringIO()
    for _ in tqdm(iter(range(5)), file=buf, mininterval=0):
        pass
    assert not ProgressMeter().feed(buf.getvalue().encode())


def test_a_bar_with_more_time_left_than_a_float_holds_has_no_time_left() -> None:
    got = parse_line(b"50%|##| 5/10 [00:01<" + b"1:" * 200 + b"1, 1it/s]")  # raised OverflowError
    assert got is not None and got["fraction"] == 0.5 and got["eta_s"] is None


def test_tqdm_time_left() -> None:
    got = parse_line(b" 42%|####2     | 42/100 [01:05<1:02:03, 40.00it/s]")
    assert got == {"fraction": 0.42, "source": "tqdm", "eta_s": 3723.0}


def test_only_the_latest_value_of_a_chunk_counts() -> None:
    m = ProgressMeter()
    data = b"".join(b"line %d\nSLOTH_PROGRESS 0.%d\n" % (i, i) for i in range(1, 10))
    assert m.feed(data)
    assert m.latest is not None and m.latest["fraction"] == pytest.approx(0.9)
    assert m.take() is m.latest and m.take() is None  # taken once until it changes again


@pytest.mark.parametrize("cut", range(1, 21))
def test_a_line_cut_between_two_reads(cut: int) -> None:
    line = b"noise\nSLOTH_PROGRESS 0.75\nmore"
    m = ProgressMeter()
    m.feed(line[:cut])
    m.feed(line[cut:])
    assert m.latest is not None and m.latest["fraction"] == pytest.approx(0.75)


def test_a_line_cut_then_ended_by_the_next_read() -> None:
    m = ProgressMeter()
    assert not m.feed(b"x\nSLOTH_PROG")
    assert m.feed(b"RESS 0.5\n")
    assert m.latest is not None and m.latest["fraction"] == 0.5


def test_a_huge_line_is_dropped_not_kept() -> None:
    m = ProgressMeter()
    for _ in range(100):
        m.feed(b"y" * 65536)
    assert len(m.carry) <= 512 and m.latest is None


def test_the_progress_file(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "p")
    m = ProgressMeter(path)
    assert not m.poll_file()  # not there yet: no progress, no error
    with open(path, "w") as f:
        f.write("0.3\n")
    assert m.poll_file() and m.latest is not None and m.latest["fraction"] == 0.3 and m.latest["source"] == "file"
    assert not m.poll_file()  # unchanged: not read again
    with open(path, "a") as f:
        f.write('{"progress": 0.6}\n')
    assert m.poll_file() and m.latest["fraction"] == 0.6
    os.unlink(path)
    os.symlink("/etc/passwd", path)  # never followed
    assert not m.poll_file()
    os.unlink(path)
    os.mkfifo(path)  # never waited on
    assert not m.poll_file()
