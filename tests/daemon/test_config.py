"""The daemon's TOML settings: defaults under systemd, errors with file/line/key, `lanes config check`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from reconciler.cli.config import config_check_cmd
from reconciler.daemon.config import (
    SYSTEMD_ENV,
    BenchSettings,
    DaemonConfig,
    DaemonSettings,
    HostOverrideSettings,
    HttpSettings,
    RepoSettings,
    SshSettings,
    UpstreamCredentialSettings,
    UpstreamSettings,
    load_config,
    parse_config,
)
from reconciler.daemon.configgateway import GatewaySettings
from reconciler.daemon.tomlpos import line_of
from reconciler.daemon.trialsettings import ExperimentSettings, ForgeSection
from reconciler.errors import InputError
from reconciler.execute.cycle import HostOverride

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "systemd" / "reconciler.toml.example"
SECTIONS: dict[str, type[BaseModel]] = {
    "repo": RepoSettings,
    "ssh": SshSettings,
    "daemon": DaemonSettings,
    "http": HttpSettings,
    "hosts.<name>": HostOverrideSettings,
    "upstream": UpstreamSettings,
    "upstream.credentials.<name>": UpstreamCredentialSettings,
    "bench": BenchSettings,
    "forge": ForgeSection,
    "experiments": ExperimentSettings,
    "gateway": GatewaySettings,
}
NO_ENV: dict[str, str] = {"HOME": "/home/op"}


def write(tmp_path: Path, text: str, name: str = "reconciler.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(text: str, **kw: object) -> InputError:
    with pytest.raises(InputError) as info:
        parse_config(text, file="r.toml", env=NO_ENV, **kw)  # type: ignore[arg-type]
    return info.value


# -- the example file and documentation ---------------------------------------------------


def test_the_example_file_is_valid_and_resolves_like_the_unit_will() -> None:
    cfg = load_config(EXAMPLE, env=SYSTEMD_ENV)
    assert cfg.repo.url == "git@forge.example.com:team/lanes-state.git"
    assert not cfg.repo.is_local
    assert cfg.repo.mirror_dir == Path("/var/lib/lanes/mirror")
    assert cfg.ssh.key == Path("/run/credentials/lanes-reconciler.service/ssh-key")
    assert cfg.ssh.known_hosts == Path("/etc/lanes/known_hosts")
    assert cfg.daemon.db == Path("/var/lib/lanes/lanes.db")
    assert cfg.daemon.secrets_dir == Path("/run/credentials/lanes-reconciler.service")
    assert cfg.http.host_port == ("127.0.0.1", 9464)
    assert cfg.http.webhook_secret_file is None
    assert (cfg.upstream.enabled, cfg.bench.enabled, cfg.hosts) == (False, False, {})


def test_the_example_file_shows_every_default() -> None:
    """Each uncommented value in the example equals the model's default (documentation does not drift)."""
    shown = load_config(EXAMPLE, env=SYSTEMD_ENV).model_dump()
    minimal = parse_config('[repo]\nurl = "git@forge.example.com:team/lanes-state.git"\n', env=SYSTEMD_ENV)
    assert shown == minimal.model_dump()


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_key_has_a_description_and_appears_in_the_example(section: str) -> None:
    text = EXAMPLE.read_text()
    model = SECTIONS[section]
    header = re.escape(section).replace("<name>", r"[a-z0-9<>._-]+")
    assert re.search(rf"^#? ?\[{header}\]", text, re.M), f"[{section}] is not in the example"
    for name, field in model.model_fields.items():
        assert field.description and len(field.description) > 15, f"{section}.{name} has no description"
        assert re.search(rf"^#? ?{name} = ", text, re.M), f"{section}.{name} is not documented in the example"
    for name, field in DaemonConfig.model_fields.items():
        assert field.description, name


# -- defaults and paths -------------------------------------------------------------------


def test_defaults_outside_systemd(tmp_path: Path) -> None:
    cfg = parse_config('[repo]\nurl = "../state-repo"\n', env=NO_ENV, base_dir=tmp_path)
    assert cfg.repo.is_local and cfg.repo.url == str(tmp_path / "../state-repo")
    assert cfg.repo.branch == "main"
    assert (cfg.repo.state_dir, cfg.repo.policies_dir) == ("state", "policies")
    assert (cfg.repo.fetch_interval_s, cfg.repo.resync_interval_s, cfg.repo.watch) == (30.0, 300.0, True)
    assert cfg.repo.mirror_dir == Path("/var/lib/lanes/mirror")
    assert cfg.ssh.key == Path("~/.ssh/id_ed25519").expanduser()
    assert cfg.ssh.known_hosts == Path("/etc/lanes/known_hosts")
    assert cfg.daemon.db == Path("/var/lib/lanes/lanes.db")
    assert cfg.daemon.secrets_dir is None
    assert re.fullmatch(r"lanes@.+", cfg.daemon.owner)
    assert cfg.daemon.log_level == "info" and cfg.daemon.drop_caches is False
    assert cfg.http.enabled and cfg.http.listen == "127.0.0.1:9464"


def test_systemd_directories_become_defaults_and_the_first_of_several_wins() -> None:
    env = {"STATE_DIRECTORY": "/var/lib/lanes:/var/lib/other", "CREDENTIALS_DIRECTORY": "/run/credentials/x"}
    cfg = parse_config('[repo]\nurl = "https://forge/x.git"\n', env=env)
    assert cfg.repo.mirror_dir == Path("/var/lib/lanes/mirror")
    assert cfg.daemon.db == Path("/var/lib/lanes/lanes.db")
    assert cfg.ssh.key == Path("/run/credentials/x/ssh-key")
    assert cfg.daemon.secrets_dir == Path("/run/credentials/x")


def test_paths_expand_variables_home_and_relative_to_the_file(tmp_path: Path) -> None:
    text = """
[repo]
url = "ssh://git@forge:2222/team/state.git"
mirror_dir = "${STATE_DIRECTORY}/m"
require_signed_commits = "ssh"
allowed_signers = "signers"
[ssh]
key = "~/keys/spark"
known_hosts = "$CONFIGURATION_DIRECTORY/kh"
[http]
webhook_secret_file = "$CREDENTIALS_DIRECTORY/webhook-secret"
"""
    env = {**NO_ENV, "STATE_DIRECTORY": "/s", "CONFIGURATION_DIRECTORY": "/c", "CREDENTIALS_DIRECTORY": "/k"}
    cfg = load_config(write(tmp_path, text), env=env)
    assert cfg.repo.mirror_dir == Path("/s/m")
    assert cfg.repo.allowed_signers == tmp_path / "signers"
    assert cfg.ssh.key == Path("~/keys/spark").expanduser()
    assert cfg.ssh.known_hosts == Path("/c/kh")
    assert cfg.http.webhook_secret_file == Path("/k/webhook-secret")


def test_an_unset_variable_is_an_error_naming_the_key() -> None:
    err = error_of('[repo]\nurl = "https://f/x.git"\n\n[daemon]\ndb = "$STATE_DIRECTORY/lanes.db"\n')
    assert (err.file, err.line, err.field) == ("r.toml", 5, "daemon.db")
    assert "$STATE_DIRECTORY is not set" in err.message


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("git@github.com:team/state.git", True),
        ("github.com:team/state.git", True),
        ("ssh://git@host:22/x.git", True),
        ("https://forge.example.com/team/state.git", True),
        ("file:///srv/git/state.git", True),
        ("/srv/git/state.git", False),
        ("./state", False),
    ],
)
def test_local_paths_and_urls_are_told_apart(url: str, remote: bool) -> None:
    cfg = parse_config(f'[repo]\nurl = "{url}"\n', env=NO_ENV, base_dir=Path("/etc/lanes"))
    assert cfg.repo.is_local is not remote
    if remote:
        assert cfg.repo.url == url
    else:
        assert Path(cfg.repo.url).is_absolute()


def test_host_overrides_and_cycle_settings() -> None:
    text = """
[repo]
url = "/srv/state"
[ssh]
concurrency = 8
probe_timeout_s = 5
command_timeout_s = 7
[daemon]
owner = "lanes@ctl"
drop_caches = true
log_level = "DEBUG"
[hosts.dgx1]
address = "127.0.0.1"
port = 2201
[hosts]
dgx2 = { address = "10.0.0.2", user = "spark" }
"""
    cfg = parse_config(text, env=NO_ENV)
    settings = cfg.cycle_settings()
    assert settings.owner == "lanes@ctl" and settings.drop_caches is True
    assert (settings.concurrency, settings.probe_timeout_s, settings.command_timeout_s) == (8, 5.0, 7.0)
    assert settings.overrides == {
        "dgx1": HostOverride("127.0.0.1", 2201, None),
        "dgx2": HostOverride("10.0.0.2", 22, "spark"),
    }
    assert cfg.daemon.log_level == "debug"


# -- errors: file, line, field --------------------------------------------------------------


def test_an_unknown_key_is_an_error_with_its_line_and_the_allowed_keys() -> None:
    err = error_of('[repo]\nurl = "/x"\n\n[ssh]\nconcurency = 4\n')
    assert (err.line, err.field) == (5, "ssh.concurency")
    assert "unknown key" in err.message and "concurrency" in err.message
    assert err.describe().startswith("r.toml:5: ssh.concurency: unknown key")


def test_an_unknown_section_is_an_error() -> None:
    err = error_of('[repo]\nurl = "/x"\n[deamon]\nowner = "x"\n')
    assert (err.line, err.field) == (3, "deamon")


def test_a_wrong_value_names_the_line_and_field() -> None:
    err = error_of('[repo]\nurl = "/x"\nfetch_interval_s = 0.1\n')
    assert (err.line, err.field) == (3, "repo.fetch_interval_s")
    assert "greater than or equal to 1" in err.message
    err = error_of('[repo]\nurl = "/x"\nwatch = "sometimes"\n')
    assert (err.line, err.field) == (3, "repo.watch")
    err = error_of('[repo]\nurl = "/x"\nrequire_signed_commits = "pgp"\n')
    assert (err.line, err.field) == (3, "repo.require_signed_commits")


def test_a_missing_required_key_points_at_its_table() -> None:
    err = error_of('# comment\n\n[repo]\nbranch = "main"\n')
    assert (err.line, err.field) == (3, "repo.url")
    assert err.message == "required key is missing"
    err = error_of("[ssh]\nconcurrency = 2\n")
    assert (err.line, err.field) == (None, "repo")


def test_signed_commits_need_allowed_signers() -> None:
    err = error_of('[repo]\nurl = "/x"\nrequire_signed_commits = "gpg"\n')
    assert err.field == "repo.allowed_signers" and err.line == 1
    assert "needs allowed_signers" in err.message


def test_gpg_signing_with_bench_needs_the_evidence_signers() -> None:
    text = '[repo]\nurl = "/x"\nrequire_signed_commits = "gpg"\nallowed_signers = "/a"\n[bench]\nenabled = true\n'
    err = error_of(text)
    assert "needs repo.evidence_signers" in err.message
    text = text.replace('allowed_signers = "/a"', 'allowed_signers = "/a"\nevidence_signers = "/e"')
    cfg = parse_config(text, env=NO_ENV)
    assert cfg.repo.evidence_signers == Path("/e") and cfg.evidence_key() == cfg.ssh.key
    cfg = parse_config(text.replace("enabled = true", 'enabled = true\nsigning_key = "/k"'), env=NO_ENV)
    assert cfg.evidence_key() == Path("/k")


def test_host_override_errors_point_into_the_host_table() -> None:
    err = error_of('[repo]\nurl = "/x"\n[hosts.dgx1]\naddress = "a"\nport = 70000\n')
    assert (err.line, err.field) == (5, "hosts.dgx1.port")
    err = error_of('[repo]\nurl = "/x"\n[hosts]\ndgx1 = { port = 22 }\n')
    assert (err.line, err.field) == (4, "hosts.dgx1.address")
    err = error_of('[repo]\nurl = "/x"\n[hosts.DGX_1]\naddress = "a"\n')
    assert err.field == "hosts" and "DGX_1" in err.message


@pytest.mark.parametrize("listen", ["9464", "localhost", "::1:9464", "127.0.0.1:http", "127.0.0.1:70000", "[::1]"])
def test_bad_listen_addresses_are_refused(listen: str) -> None:
    err = error_of(f'[repo]\nurl = "/x"\n[http]\nlisten = "{listen}"\n')
    assert (err.line, err.field) == (4, "http.listen")


@pytest.mark.parametrize("listen", ["127.0.0.1:9464", "[::1]:9464", "localhost:0", "0.0.0.0:80"])
def test_good_listen_addresses(listen: str) -> None:
    cfg = parse_config(f'[repo]\nurl = "/x"\n[http]\nlisten = "{listen}"\n', env=NO_ENV)
    assert cfg.http.host_port[1] in {9464, 0, 80}


def test_several_problems_are_counted() -> None:
    err = error_of('[repo]\nurl = "/x"\nbranch = ""\nwatch = 3\n')
    assert err.line == 3 and "(and 1 more problem)" in err.message


def test_toml_syntax_errors_carry_the_line() -> None:
    err = error_of('[repo]\nurl = "/x"\nbranch = \n')
    assert err.line == 3 and err.message.startswith("not valid TOML: Invalid value")
    assert "(at line" not in err.message


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="config file not found") as info:
        load_config(tmp_path / "nope.toml", env=NO_ENV)
    assert info.value.file == str(tmp_path / "nope.toml")


def test_line_of_handles_dotted_and_quoted_keys_and_multiline_strings() -> None:
    text = '[repo]\nnote = """\nurl = "not this"\n"""\n"url" = "/x"\n[hosts."dgx1"]\nport = 1\n[daemon]\nssh.key = 1\n'
    assert line_of(text, ("repo", "url")) == 5
    assert line_of(text, ("hosts", "dgx1", "port")) == 7
    assert line_of(text, ("daemon", "ssh", "key")) == 9
    assert line_of(text, ("bench",)) is None


# -- lanes config check ---------------------------------------------------------------------

app = typer.Typer()
app.command("check")(config_check_cmd)
app.command("noop")(lambda: None)  # two commands keep `check` a subcommand, as under `lanes config`
runner = CliRunner()


def test_config_check_prints_the_effective_settings_without_secret_values(tmp_path: Path) -> None:
    key = tmp_path / "ssh-key"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nSECRET-KEY-MATERIAL\n")
    key.chmod(0o644)
    secret = tmp_path / "webhook-secret"
    secret.write_text("hunter2-webhook-value")
    secret.chmod(0o600)
    text = (
        f'[repo]\nurl = "/x"\n[ssh]\nkey = "{key}"\n[http]\nwebhook_secret_file = "{secret}"\nlisten = "0.0.0.0:9464"\n'
    )
    path = write(tmp_path, text)
    result = runner.invoke(app, ["check", "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["ok"] is True and out["settings"]["ssh"]["key"] == str(key)
    assert out["secret_files"]["ssh.key"] == {"path": str(key), "state": "present", "kind": "file", "mode": "0644"}
    assert out["secret_files"]["http.webhook_secret_file"]["mode"] == "0600"
    assert any("ssh.key" in w and "0644" in w for w in out["warnings"])
    assert any("http.listen" in w and "not loopback" in w for w in out["warnings"])
    assert any("repo.url" in w for w in out["warnings"])
    human = runner.invoke(app, ["check", "--config", str(path)])
    assert human.exit_code == 0, human.output
    assert f'key = "{key}"' in human.output and "secret files" in human.output
    for output in (result.output, human.output):
        assert "SECRET-KEY-MATERIAL" not in output and "hunter2" not in output


def test_config_check_systemd_mode_resolves_the_units_directories(tmp_path: Path) -> None:
    path = write(tmp_path, '[repo]\nurl = "https://forge/x.git"\n')
    result = runner.invoke(app, ["check", "-c", str(path), "--systemd", "--json"])
    # The key's LoadCredential= source is not on this machine: the unit would not start (exit 2, said why).
    assert result.exit_code == 2, result.output
    out = json.loads(result.output)
    assert out["ok"] is False and out["exit_code"] == 2
    assert [p["error"] for p in out["problems"]] == [
        "ssh.key: /run/credentials/lanes-reconciler.service/ssh-key comes from LoadCredential= "
        "/etc/lanes/credentials/ssh-key, which does not exist: the unit will not start"
    ]
    assert out["settings"]["daemon"]["db"] == "/var/lib/lanes/lanes.db"
    assert out["secret_files"]["ssh.key"]["path"] == "/run/credentials/lanes-reconciler.service/ssh-key"
    assert any("LoadCredential" in w for w in out["warnings"])


def test_config_check_exits_2_with_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, '[repo]\nurl = "/x"\n[http]\nlisten = "everywhere"\n')
    result = runner.invoke(app, ["check", "--config", str(path), "--json"])
    assert result.exit_code == 2
    out = json.loads(result.output)
    assert out["ok"] is False and (out["file"], out["line"], out["field"]) == (str(path), 4, "http.listen")
    human = runner.invoke(app, ["check", "--config", str(tmp_path / "missing.toml")])
    assert human.exit_code == 2 and "config file not found" in human.output


def test_config_check_warns_about_empty_secrets_and_missing_signers(tmp_path: Path) -> None:
    secret = tmp_path / "webhook-secret"
    secret.touch(mode=0o600)
    text = (
        f'[repo]\nurl = "/x"\nrequire_signed_commits = "ssh"\nallowed_signers = "{tmp_path / "signers"}"\n'
        f'[http]\nwebhook_secret_file = "{secret}"\n'
    )
    result = runner.invoke(app, ["check", "--config", str(write(tmp_path, text)), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["secret_files"]["http.webhook_secret_file"]["state"] == "empty"
    assert any("webhook_secret_file" in w and "is empty" in w for w in out["warnings"])
    assert any("allowed_signers" in w and "every head would be refused" in w for w in out["warnings"])


# -- [gateway] ---------------------------------------------------------------------------------------------


def test_the_gateway_key_defaults_to_the_units_credential_and_is_required_when_enabled() -> None:
    cfg = parse_config('[repo]\nurl = "https://f/x.git"\n[gateway]\nenabled = true\n', env=SYSTEMD_ENV)
    assert cfg.gateway.key_file == Path(SYSTEMD_ENV["CREDENTIALS_DIRECTORY"]) / "gateway-key"
    assert cfg.secret_paths()["gateway.key_file"] == cfg.gateway.key_file  # shown by `config check`, never read
    err = error_of('[repo]\nurl = "https://f/x.git"\n\n[gateway]\nenabled = true\n')
    assert err.field == "gateway" and "key_file: required" in err.message


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://10.0.0.5:30000", "plain http only to loopback"),
        ("http://gateway.example.com", "plain http only to loopback"),
        ("ftp://127.0.0.1/", "not an http(s) URL"),
        ("http://admin:pw@127.0.0.1:30000", "no user, password"),
        ("127.0.0.1:30000", "not an http(s) URL"),
    ],
)
def test_the_gateway_url_may_not_send_its_key_in_the_clear_or_in_the_url(url: str, why: str) -> None:
    err = error_of(f'[repo]\nurl = "https://f/x.git"\n\n[gateway]\nurl = "{url}"\nkey_file = "/k"\n')
    assert (err.line, err.field) == (5, "gateway.url") and why in err.message, err
