"""paths.py (issue 20, item 5): a file someone replaced with a FIFO, a
device, a folder, a link or something huge is refused at once, saying what
it is; never blocked on, never read to its end. Real files, FIFOs and
devices in a temporary folder: nothing here can be faked more cheaply."""

from __future__ import annotations

import os
import socket
import stat
import threading
import time

import pytest

from sloth_daemon.keeper.wire import Journal, read_journal
from sloth_daemon.safefile import NotRegular, TooLarge, open_file, read_file


def prompt(fn, *a, **kw):
    """``fn(*a, **kw)`` in a thread that must end within 2 s (a hang fails the
    test instead of freezing it: the thread is a daemon, left blocked)."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = fn(*a, **kw)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(2.0)
    assert not t.is_alive(), f"{fn.__name__} blocked"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]


@pytest.mark.parametrize("flags", [os.O_RDONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_RDWR | os.O_CREAT])
def test_a_fifo_is_refused_at_once_whichever_way_it_is_opened(tmp_path, flags):
    f = tmp_path / "config.toml"
    os.mkfifo(f)
    with pytest.raises(NotRegular) as ei:
        prompt(open_file, f, flags)
    assert str(ei.value) == f"{f} is a FIFO, not a regular file"
    assert ei.value.strerror == "it is a FIFO, not a regular file"


def test_devices_folders_sockets_and_links_say_what_they_are(tmp_path):
    sock = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        (tmp_path / "zero").symlink_to("/dev/zero")
        (tmp_path / "dir").mkdir()
        cases = {"/dev/zero": "a character device", tmp_path / "dir": "a folder", sock: "a socket"}
        for path, what in cases.items():
            with pytest.raises(NotRegular, match=f"is {what}, not a regular file"):
                prompt(read_file, path, 100)
        with pytest.raises(NotRegular, match="is a symbolic link"):
            prompt(read_file, tmp_path / "zero", 100)  # sloth's own files: links are not followed
        with pytest.raises(NotRegular, match="is a character device"):
            prompt(read_file, tmp_path / "zero", 100, follow=True)  # followed, and what it leads to is checked


def test_a_link_to_a_regular_file_is_followed_when_asked(tmp_path):
    real = tmp_path / "dotfiles" / "sloth.toml"
    real.parent.mkdir()
    real.write_text("max_attempts = 7\n")
    (tmp_path / "config.toml").symlink_to(real)
    assert read_file(tmp_path / "config.toml", 100, follow=True) == b"max_attempts = 7\n"


def test_a_file_over_the_cap_is_refused_without_being_read(tmp_path):
    big = tmp_path / "config.toml"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # 8 GiB, sparse: reading it would take seconds and the memory
    t0 = time.monotonic()
    with pytest.raises(TooLarge) as ei:
        read_file(big, 1 << 20)
    assert time.monotonic() - t0 < 0.5
    assert str(ei.value) == f"{big} is larger than 1 MiB, the most sloth reads of it"
    big.write_bytes(b"x" * 1025)
    with pytest.raises(TooLarge):
        read_file(big, 1024)
    assert read_file(big, 1025) == b"x" * 1025
    assert read_file(big, 10, head=True) == b"x" * 10  # a journal: what fits is kept


def test_a_file_whose_size_says_nothing_is_still_capped():
    # /proc files report st_size 0: the cap is on what is read, not on fstat's word
    with pytest.raises(TooLarge):
        read_file("/proc/self/maps", 16)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "nothing", 10, follow=True)


def test_the_keeper_journal_on_a_fifo_is_held_in_memory_not_waited_on(tmp_path):
    j = tmp_path / "keeper.journal"
    os.mkfifo(j)
    journal = prompt(Journal, j)  # opening it to append used to block until a reader came
    assert journal.fd is None
    assert journal.append({"run": {"key": "k"}}) is False
    with pytest.raises(NotRegular):
        prompt(read_journal, j)


def test_replace_file_writes_a_regular_file_whole_and_nothing_else(tmp_path):
    from sloth_daemon.safefile import replace_file

    plain = tmp_path / "page.html"
    replace_file(plain, b"one", 0o600)
    replace_file(plain, b"two", 0o644)
    assert plain.read_bytes() == b"two" and plain.stat().st_mode & 0o777 == 0o644
    fifo, folder, link = tmp_path / "fifo", tmp_path / "dir", tmp_path / "link"
    os.mkfifo(fifo)
    folder.mkdir()
    link.symlink_to(plain)
    for path, said in ((fifo, "is a FIFO"), (folder, "is a folder"), (link, "is a symbolic link")):
        with pytest.raises(NotRegular, match=said):
            replace_file(path, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir() and link.is_symlink()
    assert plain.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "fifo", "link", "page.html"]
