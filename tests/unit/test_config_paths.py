"""Settings with their sources; paths under SLOTH_HOME; socket length limit."""

import os

import pytest

from sloth_daemon import config, paths
from sloth_daemon.errors import ConfigError, StorageError


def test_defaults_when_no_file(tmp_path):
    s = config.load(tmp_path / "config.toml")
    assert s.lease_s == 60 and s.max_attempts == 3
    assert s.source("lease_s") == "default"
    assert s.concurrency("default") == 1 and s.concurrency("other") == 1


def test_file_overrides_with_durations_and_lanes(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('lease_s = "2m"\nmax_attempts = 5\nretention_s = "1d"\ndefault_concurrency = 2\n'
                 "[lanes]\ngpu = 1\ndownloads = 4\n")
    s = config.load(f)
    assert s.lease_s == 120 and s.max_attempts == 5 and s.retention_s == 86400
    assert s.source("lease_s") == f"file {f}" and s.source("kill_grace_s") == "default"
    assert s.concurrency("downloads") == 4 and s.concurrency("unlisted") == 2
    d = s.as_dict()
    assert d["lanes"]["gpu"] == {"concurrency": 1, "source": f"file {f}"}


@pytest.mark.parametrize("text, word", [
    ("lease_s = \"soon\"", "lease_s"),
    ("max_attempts = 0", "max_attempts"),
    ("nonsense = 1", "unknown setting"),
    ("[lanes]\ngpu = -1", "lanes.gpu"),
    ("lease_s = ", "cannot read config"),
    ("clock_check_s = 0", "clock_check_s"),
])
def test_bad_config_names_the_file_and_key(tmp_path, text, word):
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(f)
    assert word in e.value.message


def test_example_config_parses(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(config.EXAMPLE)
    s = config.load(f)
    assert s.lease_s == 60 and s.log_cap_bytes == 4194304


def test_sloth_home_overrides_every_location(tmp_path):
    p = paths.resolve({"SLOTH_HOME": str(tmp_path)})
    for d in (p.data_dir, p.log_dir, p.runtime_dir, p.config_dir):
        assert str(d).startswith(str(tmp_path))
    assert p.db == tmp_path / "queue.db" and p.socket == tmp_path / "run" / "sloth.sock"
    assert p.job_log(3, 2).name == "3.2.log"


def _resolve_in(env):
    old = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(env)
        return paths.resolve()
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_platform_dirs_without_sloth_home(tmp_path):
    (tmp_path / "r").mkdir(mode=0o700)
    p = _resolve_in({"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "d"),
                     "XDG_RUNTIME_DIR": str(tmp_path / "r")})
    assert p.home is None
    assert p.db == tmp_path / "d" / "sloth" / "queue.db"
    assert p.socket == tmp_path / "r" / "sloth" / "sloth.sock"


def test_too_long_socket_path_is_a_clear_error(tmp_path):
    long = tmp_path / ("x" * 120) / "sloth.sock"
    with pytest.raises(StorageError) as e:
        paths.check_socket_path(long)
    assert str(long) in e.value.message and "SLOTH_HOME" in e.value.hint


def test_private_dir_is_0700(tmp_path):
    d = tmp_path / "a" / "b"
    paths.ensure_dir(d)
    assert (d.stat().st_mode & 0o777) == 0o700


def test_private_dir_under_a_file_fails_clearly(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(StorageError) as e:
        paths.ensure_dir(f / "sub")
    assert str(f / "sub") in e.value.message


def test_without_a_usable_runtime_dir_the_socket_stays_private_in_data(tmp_path):
    p = _resolve_in({"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "d"),
                     "XDG_RUNTIME_DIR": str(tmp_path / "missing")})
    assert str(p.socket).startswith(str(tmp_path)) or str(p.socket).startswith("/tmp/runtime-")


def test_lane_tables_hold_concurrency_limits_and_keep_awake(tmp_path):
    """[lanes.NAME] (issue 24 item 4): a lane's jobs get its limits unless they say otherwise."""
    from sloth_daemon.config import from_mapping

    s = from_mapping({"lanes": {"default": 2, "gpu": {"concurrency": 3, "mem": "2G", "nice": 5,
                                                      "io": "idle", "keep_awake": True}}}, tmp_path / "c.toml")
    assert s.lanes == {"default": 2, "gpu": 3}
    assert s.lane_holds == {"gpu": {"keep_awake": True, "limits": {"mem": 2 << 30, "nice": 5, "io": "idle"}}}
    assert s.source("lanes.gpu").startswith("file ")
    for bad, says in (({"gpu": {"mem": "lots"}}, "512M or 2G"), ({"gpu": {"nice": 99}}, "nice"),
                      ({"gpu": {"cores": 2}}, "unknown key"), ({"gpu": {"keep_awake": "yes"}}, "true or false"),
                      ({"gpu": {"concurrency": 0}}, "whole number")):
        with pytest.raises(ConfigError, match=says):
            from_mapping({"lanes": bad}, tmp_path / "c.toml")
