"""[tell] and a lane's channels in config.toml (docs/telling.md): each key
checked by its kind, a bad one refused naming the file and key, secrets
shown as *** by `sloth config` and a reload's summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sloth_daemon import config, text
from sloth_daemon.errors import ConfigError

F = Path("/x/config.toml")


def test_tell_and_a_lanes_channels_are_read_and_secrets_never_shown():
    s = config.from_mapping({"tell": {"timeout_s": "5s", "webhook_secret": "WHSEC", "smtp_password": "PW",
                                      "smtp_port": 2525, "smtp_starttls": False, "ca_file": "~/ca.pem"},
                             "lanes": {"backup": {"concurrency": 1, "ping": "https://hc.example/abc",
                                                  "mail_to": ["me@example.org"]}}}, F)
    assert s.tell["timeout_s"] == 5.0 and s.tell["smtp_port"] == 2525 and not s.tell["ca_file"].startswith("~")
    chans = json.loads(s.lane_tell["backup"])
    assert [c["kind"] for c in chans] == ["ping", "mail"] and s.lanes["backup"] == 1
    shown = json.dumps(s.as_dict())
    assert "WHSEC" not in shown and '"PW"' not in shown and '"webhook_secret": "***"' in shown
    new = config.from_mapping({"tell": {"webhook_secret": "OTHER"}}, F)
    said = "\n".join(config.changes(s, new))
    assert "WHSEC" not in said and "OTHER" not in said and "lanes.backup: its channels changed" in said


@pytest.mark.parametrize("data, words", [
    ({"tell": {"timeout": "5s"}}, "unknown key 'timeout'"),
    ({"tell": {"timeout_s": "0s"}}, "tell.timeout_s must be more than 0"),
    ({"tell": {"smtp_port": 70000}}, "tell.smtp_port must be a port number"),
    ({"tell": {"smtp_starttls": "yes"}}, "tell.smtp_starttls must be true or false"),
    ({"tell": {"webhook_secret": "a\nb"}}, "tell.webhook_secret must be a non-empty line"),
    ({"tell": "x"}, "[tell] must be a table"),
    ({"lanes": {"l": {"ping": "ftp://x/y"}}}, "[lanes.l]: ping must be an http:// or https:// URL"),
    ({"lanes": {"l": {"webhook": "https://h/p", "webhook_on": ["never"]}}}, "names an unknown event 'never'"),
])
def test_a_bad_tell_setting_is_refused_naming_it(data, words, monkeypatch):
    # another test of this worker may have remembered a password "secret" (its mask would hide the key's name)
    monkeypatch.setattr(text, "_known", ())
    with pytest.raises(ConfigError) as e:
        config.from_mapping(data, F)
    assert words in e.value.message and str(F) in e.value.message
