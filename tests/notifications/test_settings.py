"""[notifications] in the daemon's settings: documented in the example, checked at load, secrets kept apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from reconciler.daemon.config import SYSTEMD_ENV, load_config, parse_config
from reconciler.errors import InputError
from reconciler.execute.secrets import secret_values
from reconciler.notifications.settings import EVENT_KINDS, NotificationSettings, ReceiverSettings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "systemd" / "reconciler.toml.example"
REPO = '[repo]\nurl = "git@forge.example.com:team/lanes-state.git"\n'
ENV = {"HOME": "/home/op"}


@pytest.mark.parametrize(
    ("section", "model"),
    [("notifications", NotificationSettings), ("notifications.receivers.<name>", ReceiverSettings)],
)
def test_every_key_is_described_and_in_the_example(section: str, model: type[BaseModel]) -> None:
    text = EXAMPLE.read_text()
    header = re.escape(section).replace("<name>", r"[a-z0-9<>._-]+")
    assert re.search(rf"^#? ?\[{header}\]", text, re.M), f"[{section}] is not in the example"
    for name, field in model.model_fields.items():
        assert field.description and len(field.description) > 15, f"{section}.{name} has no description"
        assert re.search(rf"^#? ?{name} = ", text, re.M), f"{section}.{name} is not in the example"


def test_the_example_has_no_receiver_and_the_defaults() -> None:
    cfg = load_config(EXAMPLE, env=SYSTEMD_ENV)
    assert cfg.notifications == NotificationSettings()
    assert cfg.notifications.receivers == {}


def test_a_receiver_is_read_with_its_credential_file_under_systemd(tmp_path: Path) -> None:
    text = REPO + (
        "[notifications.receivers.team]\n"
        'url = "slack://{secret}"\n'
        'credential_file = "$CREDENTIALS_DIRECTORY/slack-webhook"\n'
        'events = ["commit.denied", "host.unreachable"]\n'
        'lanes = ["dsv41-*"]\n'
        'labels = { role = "production" }\n'
    )
    cfg = parse_config(text, env=SYSTEMD_ENV)
    team = cfg.notifications.receivers["team"]
    assert team.credential_file == Path("/run/credentials/lanes-reconciler.service/slack-webhook")
    assert team.events == ("commit.denied", "host.unreachable")
    assert cfg.credential_files()["notifications.receivers.team.credential_file"] == team.credential_file


@pytest.mark.parametrize(
    ("receiver", "words"),
    [
        ('url = "smtp://mail.example.org"', "not a receiver lanes sends to"),
        ('url = "jsons://lanes:hunter2hunter2@hooks.example.org/x"', "holds a password"),
        ('url = "slack://{secret}"', "no credential_file"),
        ('url = "jsons://hooks.example.org/x"\ncredential_file = "/etc/lanes/t"', "no {secret}"),
        ('url = "jsons://hooks.example.org/x"\nevents = ["lane.exploded"]', "'host.unreachable'"),
        ('url = "jsons://hooks.example.org/x"\nlanes = ["a b"]', "not a lane name"),
        ('url = "jsons://hooks.example.org/x"\ncolour = "red"', "team.colour: unknown key"),
    ],
)
def test_a_bad_receiver_stops_the_daemon_at_start_naming_it(receiver: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        parse_config(REPO + "[notifications.receivers.team]\n" + receiver + "\n", file="r.toml", env=ENV)
    assert words in str(info.value)
    assert info.value.field is not None and info.value.field.startswith("notifications.receivers.team")


def test_an_unknown_key_lists_the_allowed_ones() -> None:
    with pytest.raises(InputError) as info:
        parse_config(REPO + "[notifications.receivers.team]\nurl = 'json://h/x'\nlane = ['x']\n", env=ENV)
    assert "lanes" in info.value.message  # the near miss is named among the allowed keys


def test_the_receiver_secret_is_redacted_and_kept_apart_from_lane_secrets(tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "ntfy-token").write_text("tk_notifytoken0123456789\n")
    text = REPO + (
        f'[daemon]\nsecrets_dir = "{tmp_path / "lane-secrets"}"\n'
        "[notifications.receivers.ops]\n"
        'url = "ntfys://ntfy.example.org/lanes?token={secret}"\n'
        f'credential_file = "{creds / "ntfy-token"}"\n'
    )
    assert "tk_notifytoken0123456789" in secret_values(parse_config(text, env=ENV))
    # The same file where lane secrets are read: a lane could name it, so the daemon refuses to start.
    inside = text.replace(str(tmp_path / "lane-secrets"), str(creds))
    with pytest.raises(InputError) as info:
        parse_config(inside, env=ENV)
    assert "notifications.receivers.ops.credential_file" in info.value.message


def test_routing_by_kind_lane_pattern_and_host_label() -> None:
    r = ReceiverSettings(url="json://h/x", events=("lane.failed",), lanes=("dsv41-*",), labels={"role": "production"})
    prod = {"role": {"production"}, "rack": {"bench-a"}}
    assert r.wants("lane.failed", ("dsv41-flash",), prod)
    assert not r.wants("commit.denied", ("dsv41-flash",), prod)  # not its kind
    assert not r.wants("lane.failed", ("eugr-nightly",), prod)  # not its lanes
    assert not r.wants("lane.failed", ("dsv41-flash",), {"role": {"staging"}})  # not its label
    assert r.wants("lane.failed", (), {})  # about the whole fleet: goes everywhere its kind goes
    everything = ReceiverSettings(url="json://h/x")
    assert all(everything.wants(kind, ("any",), {}) for kind in EVENT_KINDS)
