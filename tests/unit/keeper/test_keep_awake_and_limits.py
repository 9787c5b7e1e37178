"""keeper/keep_awake.py's and keeper/resource_limits.py's pure parts (issue 24, items 2 and 4): the commands it
runs (the macOS one is unit-tested only: this is Linux), what it finds
here, and when a run's end is its memory limit's doing."""

from __future__ import annotations

import pytest

from sloth_daemon import checks
from sloth_daemon.errors import BadRequest, FieldError
from sloth_daemon.keeper import keep_awake, resource_limits


def test_the_inhibitor_commands_per_platform():
    assert keep_awake.inhibit_argv(12, 345, "linux") == [
        "systemd-inhibit", "--what=sleep:idle", "--who=sloth", "--why=job 12", "--mode=block", "cat"]
    assert keep_awake.inhibit_argv(12, 345, "darwin") == ["caffeinate", "-i", "-w", "345"]
    assert keep_awake.inhibit_argv(12, 345, "win32") is None


def test_a_scope_command_holds_memory_and_cpu_and_keeps_the_job_argv():
    argv = resource_limits.scope_argv({"mem": 2 << 30, "cpus": 1.5, "mem_via": "scope"}, ["python3", "-c", "x"], 7)
    assert argv[:5] == ["systemd-run", "--user", "--scope", "--quiet", "--collect"]
    assert argv[5].startswith("--unit=sloth-job-7-")
    assert argv[6:] == ["-p", "MemoryMax=2147483648", "-p", "MemorySwapMax=0", "-p", "CPUQuota=150%",
                        "--", "python3", "-c", "x"]


def test_probe_without_a_user_bus_falls_back_to_rlimit_and_has_no_cpus(monkeypatch):
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent")
    monkeypatch.setattr(resource_limits.sys, "platform", "linux")
    found = resource_limits.probe()
    assert found["mem"].startswith("setrlimit(RLIMIT_DATA)") and found["cpus"] is None
    assert "no user systemd bus" in found["why_cpus"]
    assert found["nice"] == "setpriority"


def test_probe_with_a_delegated_scope_uses_it_for_cpus_from_systemd_252(monkeypatch):
    monkeypatch.setattr(resource_limits.sys, "platform", "linux")
    monkeypatch.setattr(resource_limits, "_user_bus", lambda: True)
    monkeypatch.setattr(resource_limits, "_cgroup2", lambda: True)
    for version, cpus in ((251, None), (252, "cgroup v2 (systemd-run --user --scope -p CPUQuota)")):
        monkeypatch.setattr(resource_limits, "_systemd_version", lambda v=version: v)
        found = resource_limits.probe()
        assert found["mem"].startswith("cgroup v2") and found["cpus"] == cpus


def test_probe_on_macos_has_no_memory_limit(monkeypatch):
    monkeypatch.setattr(resource_limits.sys, "platform", "darwin")
    found = resource_limits.probe()
    assert found["mem"] is None and found["cpus"] is None and found["io"] is None


@pytest.mark.parametrize(("limits", "code", "tail", "ooms", "exceeded"), [
    ({"mem": 1 << 27, "mem_via": "rlimit"}, 1, b"...\nMemoryError\n", None, True),
    ({"mem": 1 << 27, "mem_via": "rlimit"}, 1, b"Traceback: KeyError\n", None, False),
    ({"mem": 1 << 27, "mem_via": "rlimit"}, 0, b"MemoryError", None, False),
    ({"mem": 1 << 27, "mem_via": "scope"}, -9, b"", 1, True),
    ({"mem": 1 << 27, "mem_via": "scope"}, -9, b"", 0, False),
    ({"nice": 3}, 1, b"MemoryError", None, False),
])
def test_a_run_ended_by_its_memory_limit_is_told_apart(limits, code, tail, ooms, exceeded):
    assert resource_limits.exceeded_memory(limits, code, tail, ooms) is exceeded


def test_sizes_and_limits_as_users_write_them():
    assert checks.parse_size("2G", "--mem") == 2 << 30 and checks.parse_size("100MB", "--mem") == 100 << 20
    assert checks.format_size(2 << 30) == "2G" and checks.format_size(1536 << 20) == "1536M"
    for bad in ("lots", "-1G", "0", "nanG", ""):
        with pytest.raises(BadRequest):
            checks.parse_size(bad, "--mem")
    assert checks.limits_json({"io": "be:3", "nice": 10}) == '{"nice": 10, "io": "best-effort:3"}'
    for bad in ({"mem": 10}, {"nice": 20}, {"nice": -21}, {"io": "realtime"}, {"io": "best-effort:9"},
                {"cpus": 0}, {"gpu": 1}, [1]):
        with pytest.raises(FieldError):
            checks.limits_json(bad)
    assert checks.limits_json({}) is None and checks.limits_json(None) is None
