"""The fast path of the CLI (cli/fast.py) against the Typer app it stands in
for, in process: both are made from one declaration per command
(cli/commands.py), the Typer app has exactly the declared commands and
options, the fast path reads every command line it takes as click does (and
takes the common ones) and passes what Typer passes, and the light modules it runs on (protocol's JSON, render.shell_join, text.showable,
locate.find_daemon) give what json, shlex, re and paths.resolve give.

The whole commands, run both ways as processes against real daemons, are
compared in tests/acceptance/test_fast_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from sloth_daemon import protocol, paths
from sloth_daemon.cli import locate
from sloth_daemon.cli import commands, fast
from sloth_daemon.cli.commands import FLAG, INT, LIST, PATH, REQUIRED, VALUE
from sloth_daemon.cli.fast_args import options, parse
from sloth_daemon.cli.render import shell_join
from sloth_daemon.text import showable


@pytest.fixture(scope="module")
def group():
    import typer.main

    from sloth_daemon.cli.typer_app import build

    return typer.main.get_command(build([]))


def command(group, path):
    cmd = group
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def kind_of(param) -> str:
    if param.is_flag:
        return FLAG
    if param.multiple:
        return LIST
    return {"IntParamType": INT, "TyperPath": PATH}.get(type(param.type).__name__, VALUE)


def table(name: str) -> dict[str, tuple[str, str]]:
    """The fast path's option table of a command (from its declaration)."""
    return options(commands.find(name.split()).options)


# ------------------------------------------------------ the declaration
def test_the_typer_app_has_exactly_the_declared_commands(group):
    def paths(cmd, path=()):
        subs = getattr(cmd, "commands", None)
        if subs is None:
            return [path]
        return [p for name, sub in subs.items() for p in paths(sub, (*path, name))]

    assert paths(group) == [c.path for c in commands.COMMANDS if len(c.path) == 1] + \
        [c.path for g in commands.GROUPS for c in commands.COMMANDS if c.path[0] == g.name and len(c.path) > 1]
    for g in commands.GROUPS:
        assert group.commands[g.name].help == g.help


@pytest.mark.parametrize("decl", commands.COMMANDS, ids=lambda c: " ".join(c.path))
def test_each_typer_command_has_exactly_the_declared_options_and_argument(group, decl):
    """Names, kinds, defaults, help, hidden, completer; the argument's
    number of words, metavar, help and completer; the command's help and
    how it reads options after words."""
    cmd = command(group, decl.path)
    assert cmd.help == decl.help
    assert cmd.context_settings.get("allow_interspersed_args", True) == decl.interspersed
    opts = [p for p in cmd.params if p.param_type_name == "option"]
    assert [p.name for p in opts] == [o.dest for o in decl.options]
    for p, o in zip(opts, decl.options):
        assert ([*p.opts, *p.secondary_opts], kind_of(p)) == (o.names, o.kind), o.dest
        assert (p.help, p.hidden, p.required) == (o.help, o.hidden, o.default is REQUIRED), o.dest
        if o.default is not REQUIRED:
            assert p.default == o.default, o.dest
        completer = getattr(p, "_custom_shell_complete", None)
        assert (completer is not None) == (o.complete is not None), o.dest
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    a = decl.arg
    assert [(p.name, p.nargs, p.required, p.metavar) for p in args] == \
        ([(a.dest, -1 if a.many else 1, a.required, a.metavar)] if a else [])
    if a:
        assert (getattr(args[0], "help", None), args[0]._custom_shell_complete is not None) == \
            (a.help, a.complete is not None)


@pytest.mark.parametrize("decl", commands.COMMANDS, ids=lambda c: " ".join(c.path))
def test_each_command_function_takes_exactly_the_declared_parameters(decl):
    """What the Typer app and the fast path call it with: every option
    and the argument, by name."""
    import inspect

    params = inspect.signature(decl.function()).parameters
    want = ([decl.arg.dest] if decl.arg else []) + [o.dest for o in decl.options]
    assert sorted(params) == sorted(want)
    assert all(p.default is inspect.Parameter.empty or p.name in want for p in params.values())


def test_a_fast_command_runs_without_typer():
    """A command declared fast: its function's module imports no Typer."""
    import subprocess

    mods = sorted({c.run.partition(":")[0] for c in commands.COMMANDS if c.fast})
    code = f"import sys; [__import__(m) for m in {mods!r}]; print('typer' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == \
        "False\n"


# ------------------------------------------------------- reading argv
ADD_LINES = [
    (["--", "true"], True), (["true"], True), (["echo", "--lane", "x"], True), (["-l", "video", "--", "x"], True),
    (["--lane=video", "x"], True), (["-p", "-5", "--", "x"], True), (["--priority", "+7", "x"], True),
    (["--priority", " 3 ", "x"], True), (["--priority", "1_000", "x"], True),
    (["--max-attempts", "2", "--lease", "1m", "--timeout", "2h", "--", "x"], True), (["--delay", "10m", "x"], True),
    (["--at", "tomorrow", "08:00", "--", "x"], True), (["-k", "k1", "--label", "L", "--cwd", "/tmp", "x"], True),
    (["-s", "--", "echo a | b"], True), (["--stdin"], True), (["-f", "file.txt"], True), (["--file=f"], True),
    (["--after", "1,2", "--after", "3", "--after-any", "4", "x"], True), (["--chain", "--stdin"], True),
    (["--chain-any", "-f", "x"], True), (["--retry-exit", "1,75", "x"], True), (["--no-retry-exit", "none", "x"], True),
    (["-w", "x"], True), (["--no-start", "--json", "x"], True), (["--lane", "--json", "x"], True),
    (["--lane", "--", "x"], True), (["-"], True), (["--", "--json"], True), (["x", "--", "y"], True), ([], True),
    (["--lane="], True), (["--json", "--json", "x"], True), (["--lane", "a", "--lane", "b", "x"], True),
    (["-t", "5", "mins", "--", "echo"], True), (["--", "-"], True), (["--", ""], True),
    # Left to Typer: it refuses them, or reads them in a way the fast path does not.
    (["-lvideo", "x"], False), (["-sw", "x"], False), (["--shell=yes", "x"], False), (["--bogus", "x"], False),
    (["-h"], False), (["--help"], False), (["x", "--help"], True), (["--priority", "x", "y"], False),
    (["--lane"], False), (["--=x"], False), (["--lan", "x"], False), (["-l=x", "y"], False), (["-5"], False),
    (["--max-attempts", "2.5", "x"], False),
]
LS_LINES = [
    ([], True), (["--json"], True), (["--state", "queued", "--state", "failed"], True), (["-l", "default"], True),
    (["--lane=default"], True), (["-a"], True), (["-n", "5", "--offset", "2"], True), (["--offset=-1"], True),
    (["--since", "12h"], True), (["--since=yesterday 18:00"], True),
    (["--"], True), (["--limit", "x"], False), (["-w"], False), (["--watch"], False), (["--interval", "1s"], False),
    (["-s", "queued"], False), (["--state"], False), (["-as", "x"], False),
]
SHOW_LINES = [
    (["1"], True), (["1", "2", "--json"], True), (["--json", "3"], True), (["--", "-1"], True), (["x"], True),
    ([], True), (["--json"], True),
    (["1", "--", "--json"], True), (["-1"], False), (["1", "-x"], False), (["--json=1", "2"], False),
]

# The queue edits (issue 22): on the fast path too.
EDIT_LINES = [
    (["1", "-p", "5"], True), (["1", "--priority=-2", "--lane", "w"], True), (["1", "--", "make", "-j4"], True),
    (["1", "--after", "none"], True), (["--lane", "w", "1"], True), (["1", "--command", "echo a | b"], True),
    (["1", "--label", ""], True), (["1", "--at", "9pm", "--json"], True), (["1", "--after-any", "2,3"], True),
    (["1", "-p", "x"], False), (["-h"], False), (["1", "--bogus"], False), (["1", "-p"], False),
]
BUMP_LINES = [(["1"], True), (["1", "2", "--json"], True), (["-1"], False), (["--", "7"], True)]
HOLD_LINES = [(["1", "2"], True), (["--lane", "v"], True), ([], True), (["--json", "3"], True),
              (["-l", "v", "--json"], True), (["--lane"], False)]
EDIT_PARITY = [("edit", True, EDIT_LINES), ("bump", True, BUMP_LINES), ("hold", True, HOLD_LINES),
               ("release", True, HOLD_LINES)]


# The daily commands on the fast path besides add, ls and show (issue 22): (args, taken?).
DAILY_LINES = {
    "status": [([], True), (["--json"], True), (["x"], False), (["-h"], False)],
    "logs": [(["1"], True), (["-f", "1"], True), (["--attempt", "2", "-n", "5", "1"], True), (["--path", "1"], True),
             (["--tail=3", "1"], True), ([], True), (["1", "2"], False), (["-n", "x", "1"], False), (["-fn", "1"], False)],
    "cancel": [(["1", "2"], True), (["--lane", "video"], True), (["--state", "queued", "--state", "running"], True), (["-s", "queued"], False),
               (["--json"], True), ([], True), (["-x"], False), (["--lane"], False)],
    "retry": [(["--failed", "-l", "v"], True), (["3"], True), ([], True), (["--failed=1"], False)],
    "kill": [(["1", "--now"], True), (["--json", "2"], True), ([], False)],
    "pause": [([], True), (["video"], True), (["--json", "v"], True), (["--job", "1", "2"], True),
              (["v", "--jobs"], True), (["--job=1"], False)],
    "resume": [([], True), (["video"], True), (["--job", "3"], True), (["--jobs"], True)],
    "lane ls": [([], True), (["--json"], True), (["x"], False)],
    "restart": [(["1", "2"], True), (["--json", "3"], True), ([], False)],
    "prune": [([], True), (["--older-than", "0", "--state", "done", "--state=failed", "-l", "x", "--dry-run", "--json"], True),
              (["x"], False)],
    "lane set": [(["v", "-c", "2"], True), (["--create", "-c", "0", "v", "--json"], True), (["v"], False),
                 (["-c", "2"], False), (["v", "-c", "x"], False)],
    "lane rm": [(["v"], True), ([], False), (["v", "w"], False), (["--json", "v"], False)],
}
SMALLEST = {"show": ["1"], "edit": ["1"], "bump": ["1"], "logs": ["1"], "kill": ["1"], "restart": ["1"], "lane set": ["v", "-c", "1"],
            "lane rm": ["v"]}  # each command's shortest line


def click_reads(cmd, args: list[str]) -> dict:
    return dict(cmd.make_context(cmd.name, list(args)).params)


@pytest.mark.parametrize("name, interspersed, lines", [
    ("add", False, ADD_LINES), ("ls", True, LS_LINES), ("show", True, SHOW_LINES), *EDIT_PARITY])
def test_every_line_the_fast_path_takes_is_read_as_click_reads_it(group, name, interspersed, lines):
    cmd = command(group, [name])
    words_param = next((p.name for p in cmd.params if p.param_type_name == "argument"), None)
    unset = click_reads(cmd, ["x"] if words_param else [])
    for args, taken in lines:
        got = parse(args, table(name), interspersed=interspersed)
        assert (got is not None) == taken, (name, args)
        if got is None:
            continue
        given, words = got
        want = click_reads(cmd, args)
        for p in cmd.params:
            if p.name == words_param:
                assert list(want[p.name]) == words, (args, want)
            elif p.name in given:
                v = given[p.name]
                v = str(v) if isinstance(v, Path) else v  # click reads the text; Typer makes it a Path
                assert want[p.name] == (tuple(v) if isinstance(v, list) else v), (args, p.name)
            else:
                assert want[p.name] == unset[p.name], (args, p.name)


@pytest.mark.parametrize("name", ["add", "ls", "show", *DAILY_LINES, "edit", "bump", "hold", "release"])
def test_what_the_fast_path_leaves_out_means_what_typer_leaves_out(group, name):
    """An option not on the line: the fast path passes its declared
    default; Typer passes its default. The same to the shared code."""
    decl = commands.find(name.split())
    passed = fast.read(decl, SMALLEST.get(name, []))
    cmd = command(group, decl.path)
    given = parse(SMALLEST.get(name, []), table(name))[0]  # a required option, given
    for p in cmd.params:
        if p.param_type_name == "argument" or p.name in given:
            continue
        typers = p.get_default(cmd.make_context(name, list(SMALLEST.get(name, []))))
        assert passed[p.name] == typers, (name, p.name, passed[p.name], typers)


@pytest.mark.parametrize("name, lines", [("add", ADD_LINES), ("ls", LS_LINES), ("show", SHOW_LINES),
                                         ("daemon run", [([], True), (["x"], False), (["--json"], False)]),
                                         *DAILY_LINES.items(), *[(n, lines) for n, _, lines in EDIT_PARITY]])
def test_the_fast_path_calls_the_command_with_what_typer_calls_it_with(group, monkeypatch, name, lines):
    """Every line the fast path takes: the same function, the same values
    (types too: a Path, a list, an int) as the Typer app gives it."""
    import typer

    calls = []
    monkeypatch.setattr(commands.Command, "function", lambda self: lambda **kw: calls.append(kw))
    decl = commands.find(name.split())
    cmd = command(group, decl.path)
    for args, taken in lines:
        ours = fast.read(decl, list(args))
        assert (ours is not None) == taken, (name, args)
        if ours is None:
            continue
        try:
            cmd.main(list(args), prog_name="sloth", standalone_mode=False)
        except typer.Exit:
            pass
        assert calls.pop() == ours, (name, args)


def test_what_is_not_ours_is_left_untouched(monkeypatch):
    """Another command, an option before the command: None, and nothing
    printed or done (no command at all is the fast path's: plain `sloth`
    shows the day at a glance)."""
    monkeypatch.delenv("_SLOTH_COMPLETE", raising=False)
    for argv in (["--debug", "add", "--", "true"], ["-V"], ["daemon", "status"], ["ad"],
                 ["add", "-l", "x", "--help"], ["ls", "--watch"]):  # `add --help` alone: fast_help.py
        assert fast.handle(argv) is None, argv


# ------------------------------------------------------ light modules
CHARS = st.characters(exclude_categories=())  # lone surrogates too: bytes that were not UTF-8
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(CHARS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_protocol_json_writes_what_json_writes(v):
    for ensure_ascii in (True, False):
        assert protocol.dumps(v, ensure_ascii=ensure_ascii) == json.dumps(v, ensure_ascii=ensure_ascii)
        assert protocol.dumps(v, ensure_ascii=ensure_ascii, compact=True) == \
            json.dumps(v, ensure_ascii=ensure_ascii, separators=(",", ":"))
    assert protocol.dumps_pretty(v) == json.dumps(v, indent=2, sort_keys=True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["counts", "a", "ab"]), json_values, max_size=3),
       st.lists(json_values, max_size=6),
       st.dictionaries(st.sampled_from(["lanes", "left_out", "offset", "total", "z"]), json_values, max_size=5))
def test_protocol_json_streams_a_document_as_dumps_pretty_writes_it_whole(before, items, after):
    """`ls --json` of any size: its text written an item at a time is the text of the whole."""
    items = items + [{"id": i, "x": [i, None], "s": "\udcff"} for i in range(3)]  # many dicts of one set of keys
    got = "".join(protocol.pretty_stream(before, "jobs", iter(items), lambda: after))
    assert got == json.dumps({**before, "jobs": items, **after}, indent=2, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_protocol_json_reads_what_json_reads(v):
    text = json.dumps(v)
    for t in (text, f" \n{text}\t\r ", json.dumps(v, indent=1)):
        assert json.dumps(protocol.loads(t)) == json.dumps(json.loads(t))


@pytest.mark.parametrize("text", ["", " ", "{", "[1,]", "1 2", "\ufeff1", "nul", '"\\x"', '{"a" 1}', "[" * 100_000,
                                  '"a\x00"', "NaNx", "-", "01"])
def test_protocol_json_refuses_what_json_refuses_in_its_words(text):
    with pytest.raises(Exception) as want:
        json.loads(text)
    with pytest.raises(Exception) as got:
        protocol.loads(text)
    assert (type(got.value), str(got.value)) == (type(want.value), str(want.value))


def test_protocol_json_refuses_what_json_cannot_write():
    for bad in ({1: {2, 3}}, [object()], {(1, 2): 3}):
        for ours, theirs in ((protocol.dumps_pretty, lambda v: json.dumps(v, indent=2, sort_keys=True)),
                             (protocol.dumps, json.dumps)):
            with pytest.raises(TypeError) as want:
                theirs(bad)
            with pytest.raises(TypeError) as got:
                ours(bad)
            assert str(got.value) == str(want.value)


@given(st.lists(st.text(CHARS)))
def test_shell_join_is_shlex_join(args):
    assert shell_join(args) == shlex.join(args)


@given(st.text(CHARS))
def test_showable_escapes_as_before(s):
    from sloth_daemon import text

    assert showable(s) == re.sub(text._UNSHOWABLE, text._escape, s)


# ------------------------------------------------------ where the daemon is
@pytest.mark.parametrize("env, plain", [
    ({"SLOTH_HOME": "/srv/q"}, True), ({"SLOTH_HOME": "/srv/q/"}, True), ({"SLOTH_HOME": "~/q"}, True),
    ({"SLOTH_HOME": "rel"}, False), ({"SLOTH_HOME": ""}, True), ({}, True), ({"XDG_DATA_HOME": "/x/data"}, True),
    ({"XDG_DATA_HOME": "/x/data/"}, True), ({"XDG_DATA_HOME": "rel/data"}, False), ({"XDG_DATA_HOME": " "}, False),
    ({"XDG_DATA_HOME": ""}, True), ({"HOME": "/h/me/"}, True), ({"HOME": "relative"}, False), ({"HOME": ""}, False),
    ({"HOME": None}, False), ({"HOME": "/"}, True),
])
def test_the_plain_data_dir_is_where_resolve_puts_the_queue(monkeypatch, env, plain):
    """Where the environment makes the data dir plain, it is resolve()'s;
    elsewhere (or off Linux) find_daemon asks resolve() itself."""
    if not sys.platform.startswith("linux") and not env.get("SLOTH_HOME"):
        pytest.skip("the plain data dir is Linux's XDG rule")
    monkeypatch.setenv("HOME", "/home/someone")
    for k in ("SLOTH_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    got = locate.plain_data_dir()
    assert (got is not None) == plain, env
    if got is not None:
        assert Path(got) == paths.resolve().data_dir, env


def test_find_daemon_goes_where_daemon_socket_goes(tmp_path, monkeypatch):
    """A socket of ours recorded in the lock file is found without resolve();
    anything else is resolve()'s and daemon_socket()'s to decide."""
    home = tmp_path / "h"
    home.mkdir()
    monkeypatch.setenv("SLOTH_HOME", str(home))
    p = paths.resolve()
    elsewhere = tmp_path / "s.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(elsewhere))
    try:
        for recorded in (None, str(elsewhere), str(p.socket), str(tmp_path / "missing.sock"), str(tmp_path)):
            (home / "daemon.lock").write_text(f"123\n{recorded}\n" if recorded else "123\n")
            sock, lock = locate.find_daemon()
            assert (Path(sock), Path(lock)) == (locate.daemon_socket(p), p.lock), recorded
    finally:
        srv.close()
    os.unlink(elsewhere)


def test_daemon_run_starts_the_daemon_without_loading_typer():
    """`sloth daemon run` (the login service's command) keeps Typer out of
    the long-lived daemon: ~5 MiB resident for nothing."""
    import subprocess
    import sys

    code = ("import sys, sloth_daemon.daemon.main as d; d.main = lambda: 7; "
            "from sloth_daemon.cli import fast; "
            "print(fast.handle(['daemon', 'run']), fast.handle(['daemon', 'start']), 'typer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["7", "None", "False"]
