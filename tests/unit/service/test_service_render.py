"""Rendering the login service: systemd-analyze accepts the unit, plistlib the plist."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sloth_daemon import paths as paths_mod
from sloth_daemon import service
from sloth_daemon.service import plist_binary

REPO = Path(__file__).resolve().parents[3]
SLOTH = Path(sys.executable).with_name("sloth")  # the venv's console script
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"
needs_sloth = pytest.mark.skipif(not SLOTH.is_file(), reason="no sloth console script beside python")
needs_analyze = pytest.mark.skipif(not os.path.exists(SYSTEMD_ANALYZE), reason="no systemd-analyze")


def home(tmp_path: Path, name: str = "home", config: str | None = None) -> paths_mod.Paths:
    h = tmp_path / name
    h.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (h / "config.toml").write_text(config)
    return paths_mod.resolve({"SLOTH_HOME": str(h)})


def no_home(tmp_path: Path) -> paths_mod.Paths:
    p = home(tmp_path, "plain")
    return paths_mod.Paths(None, p.data_dir, p.log_dir, p.runtime_dir, p.config_dir)


def unit_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
            continue
        key, _, value = line.partition("=")
        assert current is not None, line
        sections[current].append((key, value))
    return sections


def one(sections: dict, section: str, key: str) -> str:
    values = [v for k, v in sections[section] if k == key]
    assert len(values) == 1, (section, key, values)
    return values[0]


def analyze(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    d = tmp_path / "unitdir"
    d.mkdir(exist_ok=True)
    (d / "sloth.service").write_text(text)
    rt = tmp_path / "xdg-runtime"
    rt.mkdir(mode=0o700, exist_ok=True)
    os.chmod(rt, 0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(rt), "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": ""}
    return subprocess.run([SYSTEMD_ANALYZE, "verify", "--user", str(d / "sloth.service")],
                          capture_output=True, text=True, env=env, timeout=30)


# ------------------------------------------------------------------ systemd
@needs_sloth
@needs_analyze
def test_unit_passes_systemd_analyze_verify_without_a_single_warning(tmp_path):
    text = service.render("linux", program=[str(SLOTH)], paths=home(tmp_path))
    cp = analyze(tmp_path, text)
    assert cp.returncode == 0, cp.stderr
    assert cp.stderr == ""
    assert cp.stdout == ""


@needs_sloth
@needs_analyze
def test_awkward_paths_are_quoted_so_systemd_reads_them_back(tmp_path):
    odd = tmp_path / "my venv $HOME 100%" / "bin"  # $ is literal in the path, % a specifier
    odd.mkdir(parents=True)
    (odd / "sloth").symlink_to(SLOTH)
    p = home(tmp_path, 'q "x" 50% $USER')
    text = service.render("linux", program=[str(odd / "sloth")], paths=p)
    assert analyze(tmp_path, text).stderr == ""
    assert service.unit_exec_binary(text) == str(odd / "sloth")
    env = [v for k, v in unit_sections(text)["Service"] if k == "Environment"]
    assert env == ["PYTHONUNBUFFERED=1", r'"SLOTH_HOME=' + str(p.home).replace("%", "%%").replace('"', r"\"") + '"']


def test_unit_directives(tmp_path):
    text = service.render("linux", program=["/opt/sloth venv/bin/sloth"], paths=no_home(tmp_path))
    s = unit_sections(text)
    assert one(s, "Service", "Type") == "notify"
    assert one(s, "Service", "ExecStart") == '"/opt/sloth venv/bin/sloth" daemon run'
    assert one(s, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"  # `systemctl reload`: SIGHUP re-reads config
    assert one(s, "Service", "Restart") == "on-failure"
    assert int(one(s, "Service", "RestartSec")) >= 1
    assert int(one(s, "Unit", "StartLimitIntervalSec")) > 0
    assert int(one(s, "Unit", "StartLimitBurst")) >= 3
    assert int(one(s, "Service", "WatchdogSec")) > 0
    assert one(s, "Service", "KillMode") == "process"  # the keeper and its jobs outlive a restart
    assert int(one(s, "Service", "TimeoutStopSec")) >= 10 + 15  # well above the default kill grace
    assert one(s, "Install", "WantedBy") == "default.target"
    envs = [v for k, v in s["Service"] if k == "Environment"]
    assert envs == ["PYTHONUNBUFFERED=1"]  # nothing baked without SLOTH_HOME, and no PATH reliance
    assert not re.search(r"@[A-Z_]+@", "\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))


def test_unit_bakes_sloth_home(tmp_path):
    p = home(tmp_path)
    s = unit_sections(service.render("linux", program=[str(SLOTH)], paths=p))
    assert ("Environment", f"SLOTH_HOME={p.home}") in s["Service"]


def test_stop_timeout_follows_the_configured_kill_grace(tmp_path):
    p = home(tmp_path, config='kill_grace_s = "90s"\n')
    s = unit_sections(service.render("linux", program=[str(SLOTH)], paths=p))
    assert int(one(s, "Service", "TimeoutStopSec")) == 110
    plist = plistlib.loads(service.render("macos", program=[str(SLOTH)], paths=p).encode())
    assert plist["ExitTimeOut"] == 110


def test_unit_template_opens_with_a_comment_saying_where_it_goes():
    text = (REPO / "service" / "sloth.service").read_text()
    head = text.split("\n[", 1)[0]
    assert text.startswith("#")
    assert "~/.config/systemd/user/sloth.service" in head
    assert "systemctl --user enable --now sloth.service" in head
    assert "KillMode=process" in head


# ------------------------------------------------------------------ launchd
ALLOWED_PROCESS_TYPES = {"Background", "Standard", "Adaptive", "Interactive"}


def check_plist_schema(d: dict) -> None:
    assert isinstance(d["Label"], str) and d["Label"] == service.LABEL
    args = d["ProgramArguments"]
    assert isinstance(args, list) and args and all(isinstance(a, str) for a in args)
    assert os.path.isabs(args[0])
    assert args[-2:] == ["daemon", "run"]
    assert d["RunAtLoad"] is True
    assert d["KeepAlive"] == {"SuccessfulExit": False}
    assert d["AbandonProcessGroup"] is True  # the keeper and its jobs outlive the daemon
    assert d["ProcessType"] in ALLOWED_PROCESS_TYPES
    for key in ("StandardOutPath", "StandardErrorPath"):
        assert isinstance(d[key], str) and os.path.isabs(d[key])
    if "EnvironmentVariables" in d:
        env = d["EnvironmentVariables"]
        assert isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    assert isinstance(d["ExitTimeOut"], int) and not isinstance(d["ExitTimeOut"], bool)
    assert d["ExitTimeOut"] > 10  # above the default kill grace


def test_plist_round_trips_and_matches_the_schema(tmp_path):
    p = home(tmp_path)
    text = service.render("macos", program=[str(SLOTH)], paths=p)
    d = plistlib.loads(text.encode("utf-8"))
    check_plist_schema(d)
    assert d["ProgramArguments"] == [str(SLOTH), "daemon", "run"]
    assert d["ProcessType"] == "Standard"  # jobs are user work: not throttled
    assert d["StandardOutPath"] == d["StandardErrorPath"] == str(p.daemon_log)
    env = d["EnvironmentVariables"]
    assert env["SLOTH_HOME"] == str(p.home)
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PATH"].split(":")[0] == str(SLOTH.parent)
    # Writing it back gives the same data (plistlib is the schema of record).
    assert plistlib.loads(plistlib.dumps(d)) == d
    assert plist_binary(text) == str(SLOTH)


def test_plist_without_sloth_home_and_with_xml_special_characters(tmp_path):
    p = no_home(tmp_path)
    prog = ["/Users/a&b/<venv>/bin/python3", "-m", "sloth_daemon"]
    d = plistlib.loads(service.render("macos", program=prog, paths=p).encode())
    check_plist_schema(d)
    assert d["ProgramArguments"] == [*prog, "daemon", "run"]
    assert "SLOTH_HOME" not in d["EnvironmentVariables"]


def test_plist_comment_follows_the_xml_declaration():
    text = (REPO / "service" / "io.slothqueue.sloth.plist").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("<?xml ")
    assert lines[1] == "<!--"
    comment = text.split("<!--", 1)[1].split("-->", 1)[0]
    assert "--" not in comment  # illegal inside an XML comment
    assert "~/Library/LaunchAgents/io.slothqueue.sloth.plist" in comment
    assert "launchctl bootstrap gui/" in comment


# -------------------------------------------------------------- the pieces
def test_fill_skips_comments_and_rejects_leftovers():
    text = "# @A@ stays\n<!--\n @A@ stays\n-->\nx=@A@\n  @B@\n"
    assert service.fill(text, A="1", B=["p", "q"]) == "# @A@ stays\n<!--\n @A@ stays\n-->\nx=1\n  p\n  q\n"
    assert service.fill("keep\n@B@\n", B=[]) == "keep\n"
    with pytest.raises(service.ServiceError):
        service.fill("x=@C@\n", A="1")


def test_unit_rejects_a_newline_in_a_path(tmp_path):
    with pytest.raises(service.ServiceError):
        service.render("linux", program=["/a\nb/sloth"], paths=no_home(tmp_path))


@needs_sloth
def test_sloth_program_finds_the_console_script_of_this_environment():
    assert service.sloth_program() == [str(SLOTH)]


def test_templates_load_from_the_checkout_or_the_wheel():
    for name in ("sloth.service", "io.slothqueue.sloth.plist"):
        assert service.template(name) == (REPO / "service" / name).read_text()


def test_platform_override(monkeypatch):
    monkeypatch.setenv(service.PLATFORM_ENV, "macos")
    assert service.platform() == "macos"
    assert service.platform("linux") == "linux"
    monkeypatch.setenv(service.PLATFORM_ENV, "windows")
    with pytest.raises(service.BadRequest):
        service.platform()


def test_unit_path_honours_xdg_config_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert service.unit_path("linux") == tmp_path / "cfg" / "systemd" / "user" / "sloth.service"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative")  # invalid per the spec: ignored
    assert service.unit_path("linux") == tmp_path / "home" / ".config" / "systemd" / "user" / "sloth.service"
    assert service.unit_path("macos") == tmp_path / "home" / "Library" / "LaunchAgents" / "io.slothqueue.sloth.plist"
