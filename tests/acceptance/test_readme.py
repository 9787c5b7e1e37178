"""The README's examples run, so none can drift from the product (issue 22).

Every ```sh block of README.md runs, in the README's order, in bash (``-e``,
``-o pipefail``) in one temporary HOME: a clean environment, XDG_RUNTIME_DIR
in the temporary folder, PATH = the bin folder of the venv running the tests
(the `sloth` installed there) + /usr/bin:/bin. The first `sloth add` starts
the real daemon, as it does for a person; everything that carries the
temporary HOME (the daemon, its keeper, their jobs) is killed at the end.

Each block runs in a shell of its own, in the home folder (a block uses no
variable of another: each can be pasted alone). A command that fails fails
its block, naming the README line, unless its comment says the exit status
it expects (``# ...; exits 5``): then that status and no other.

A block that cannot run on a test machine (it installs, needs systemd or
PostgreSQL) is marked in the README by ``<!-- not run: WHY -->`` on the line
before its fence; it is reported as skipped with that reason
(``pytest -rs`` lists them). An unmarked block that fails fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from sloth_daemon import config
from tests.support.harness import kill_and_wait, processes_with_env

pytestmark = pytest.mark.acceptance

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 300
BLOCK_TIMEOUT_S = 60  # a block is a few seconds; past this an example blocks (forever, probably)
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->$")
EXPECTS = re.compile(r"\bexits (\d+)\b")


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # the README line of the block's first line of text (after the fence)
    text: str
    not_run: str | None  # why, if marked

    @property
    def name(self) -> str:
        return f"line{self.line}"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, with the "not run" mark of each."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise AssertionError(f"README line {i + 1}: a ``` block is never closed")
        before = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = NOT_RUN.match(before)
        out.append(Block(fence.group(1), i + 2, "\n".join(lines[i + 1:j]) + "\n", mark.group(1) if mark else None))
        i = j + 1
    return out


def script(block: Block) -> str:
    """The block as a bash script: one line for each README line (so $LINENO
    names it), a failing command reported with its README line, and a line
    whose comment says ``exits N`` checked for exactly N."""
    first = block.line - 1
    head = ("set -e -o pipefail\n"
            f"trap 'echo \"README line $((LINENO + {first} - 2)): exit $? from: $BASH_COMMAND\" >&2' ERR\n")
    body = []
    for n, line in enumerate(block.text.splitlines(), start=block.line):
        code, _, comment = line.partition("  #")
        want = EXPECTS.search(comment)
        if want and code.strip():
            line = (f"{code} && __rc=0 || __rc=$?; [ \"$__rc\" -eq {want.group(1)} ] || "
                    f"{{ echo \"README line {n}: expected exit {want.group(1)}, got $__rc\" >&2; exit 1; }}")
        body.append(line)
    return head + "\n".join(body) + "\n"


def product_bin() -> Path:
    """The bin folder of the venv running the tests, where `pip install` put `sloth`."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "sloth").exists():
        raise AssertionError(f"no sloth in {bin_dir}: pip install -e '.[test]' into the venv that runs the tests")
    return bin_dir


class Day:
    """A temporary HOME as on a fresh machine, and every process it starts."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir()
        run = root / "run"
        run.mkdir(mode=0o700)
        self.env = {
            "HOME": str(self.home), "USER": os.environ.get("USER", "user"), "LANG": "C.UTF-8",
            "PATH": f"{product_bin()}:/usr/bin:/bin", "XDG_RUNTIME_DIR": str(run), "TERM": "dumb",
        }
        self.made_install = False

    def run(self, block: Block) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(["bash", "--noprofile", "--norc", "-c", script(block)], env=self.env,
                                  cwd=self.home, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"README line {block.line}: the block still ran after {BLOCK_TIMEOUT_S} s "
                                 f"(an example must not block)\n{e.stdout or ''}{e.stderr or ''}") from None

    def reap(self) -> None:
        kill_and_wait(processes_with_env("HOME", str(self.home)), [])

    def installed(self) -> None:
        """What the install block (not run: it clones and installs from the
        network) leaves, for the upgrade block to run on: ~/slothqueue, a
        clone of this repository, and ~/.sloth, a venv that finds sloth's
        dependencies in the venv running the tests (a .pth file), so its
        `pip install .` builds and installs sloth as a person's does."""
        clone, venv = self.home / "slothqueue", self.home / ".sloth"
        if self.made_install:
            return
        self.made_install = True
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, env=self.env, timeout=120)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=self.env, timeout=120)
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "sloth-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")


@pytest.fixture(scope="module")
def day() -> Iterator[Day]:
    root = Path(tempfile.mkdtemp(prefix="slr-"))  # short: the socket's path is limited
    d = Day(root)
    try:
        yield d
    finally:
        d.reap()
        shutil.rmtree(root, ignore_errors=True)


def failure(block: Block, p: subprocess.CompletedProcess[str]) -> str:
    return (f"README block at line {block.line} exited {p.returncode}:\n{block.text}"
            f"--- stdout\n{p.stdout[-3000:]}--- stderr\n{p.stderr[-3000:]}")


SH = [b for b in blocks(README.read_text()) if b.lang == "sh"]


@pytest.mark.parametrize("block", SH, ids=[b.name for b in SH])
def test_readme_sh_block_runs(day: Day, block: Block) -> None:
    if block.not_run is not None:
        pytest.skip(f"README line {block.line}: not run: {block.not_run}")
    if "~/.sloth" in block.text:  # the upgrade and uninstall blocks: on what the install made
        day.installed()
    p = day.run(block)
    assert p.returncode == 0, failure(block, p)


def test_readme_blocks_found_and_most_run() -> None:
    """The extraction finds the README's blocks and most of them run (a
    README whose every block were marked "not run" would test nothing)."""
    ran = [b for b in SH if b.not_run is None]
    assert len(SH) >= 8 and len(ran) >= len(SH) - 4, [(b.line, b.not_run) for b in SH]
    for b in SH:
        assert b.not_run is None or b.not_run, f"README line {b.line}: say why it is not run"


def test_the_readme_opens_with_the_two_set_up_commands_and_ci_runs_the_second() -> None:
    """The first two blocks: install and run a job; install the test extras
    and run the whole suite, the very command .ci/run runs on a clean clone."""
    first, second = SH[0].text.splitlines(), SH[1].text.splitlines()
    assert first[0].startswith("# 1.") and "sloth add" in SH[0].text, first
    assert second[0].startswith("# 2.") and len(second) == 2, second
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert second[1] in ci, f"{second[1]!r} is not the line .ci/run runs"
    assert "pytest -q" in second[1] and "'.[test]'" in second[1]


def test_toml_blocks_are_settings(tmp_path: Path) -> None:
    """A config.toml shown in the README or the reference is one sloth reads
    (no unknown key, no bad value)."""
    toml = [b for doc in (README, ROOT / "docs" / "reference.md") for b in blocks(doc.read_text()) if b.lang == "toml"]
    assert len(toml) >= 2
    for b in toml:
        f = tmp_path / "config.toml"
        f.write_text(b.text)
        config.load(f)  # raises ConfigError naming the key


def test_the_readme_says_how_to_get_venv_upgrade_and_uninstall() -> None:
    """Issue 30, set-up: the venv package stock Debian/Ubuntu lacks is named
    where it is needed, and upgrade and uninstall have blocks of their own
    (which test_readme_sh_block_runs runs: after the uninstall, the
    program's and the data's folders are gone)."""
    text = README.read_text()
    assert "apt install python3-venv" in text
    run = {b.text.splitlines()[0] for b in SH if b.not_run is None}
    assert any(t.startswith("# upgrade:") for t in run) and any(t.startswith("# uninstall:") for t in run), run
    last = [b for b in SH if b.not_run is None][-1]
    assert last.text.startswith("# uninstall:"), "the uninstall block runs last: it removes the data"


def test_after_the_uninstall_block_nothing_is_left(day: Day) -> None:
    """Runs after every block (pytest runs this module's tests in order)."""
    if not day.made_install:
        pytest.skip("the README's upgrade and uninstall blocks did not run in this session")
    left = [p for p in (".sloth", "slothqueue", ".local/share/sloth", ".local/state/sloth", ".config/sloth")
            if (day.home / p).exists()]
    assert left == [], left
    deadline = time.monotonic() + 20  # the stopped daemon's keeper ends once it holds nothing
    while processes_with_env("HOME", str(day.home)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_with_env("HOME", str(day.home))


def test_readme_is_short_and_links_lead_somewhere() -> None:
    """At most 300 lines (issue 22), and every link of the README and of
    docs/ names a file and a heading that exist."""
    assert len(README.read_text().splitlines()) <= MAX_LINES
    for doc in (README, *sorted((ROOT / "docs").glob("*.md"))):
        text = doc.read_text()
        for target, anchor in re.findall(r"\]\(([\w./-]*)(?:#([\w-]+))?\)", text):
            if target.startswith(("http:", "https:")):
                continue
            path = (doc.parent / target) if target else doc
            assert path.exists(), f"{doc.name} links to {target}, which does not exist"
            if anchor:
                headings = {slug(h) for h in re.findall(r"^#+\s+(.*)$", path.read_text(), re.M)}
                assert anchor in headings, f"{doc.name} links to {target}#{anchor}: no such heading"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# ------------------------------------------- the runner catches what drifts
def test_a_renamed_option_fails_its_block(day: Day) -> None:
    """What the README test is for: an example whose option the product no
    longer has fails, naming the README line."""
    b = Block("sh", 40, "sloth ls\nsloth ls --state-of-the-art failed   # an option sloth has not\n", None)
    p = day.run(b)
    assert p.returncode != 0
    assert "README line 41: exit 2" in p.stderr, p.stderr


def test_an_expected_exit_is_checked_exactly(day: Day) -> None:
    assert day.run(Block("sh", 1, "sh -c 'exit 5'   # fails on purpose; exits 5\n", None)).returncode == 0
    p = day.run(Block("sh", 7, "true   # would fail; exits 5\n", None))
    assert p.returncode != 0 and "README line 7: expected exit 5, got 0" in p.stderr, p.stderr


def test_marks_are_read_from_the_line_before_the_fence() -> None:
    text = ("# t\n\n<!-- not run: needs systemd -->\n```sh\nsloth service install\n```\n\n"
            "some words\n\n```sh\nfalse\n```\n")
    marked, unmarked = blocks(text)
    assert (marked.not_run, marked.line) == ("needs systemd", 5)
    assert (unmarked.not_run, unmarked.line) == (None, 11)
