"""`lanes config check`: validate the daemon's TOML file and print the effective settings.

Run it before `systemctl restart lanes-reconciler`: a bad key is reported with
file, line and field (exit 2) instead of a unit that fails to start. Secret
files are named and stat'ed, never opened, so the output is safe to paste.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from reconciler.cli.common import EXIT_INPUT, EXIT_OK, err_console, error_json, handle_errors
from reconciler.daemon.config import DEFAULT_CONFIG, SYSTEMD_ENV, ConfigError, DaemonConfig, load_config
from reconciler.daemon.http import is_loopback
from reconciler.source.mirror import public_url

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", envvar="LANES_CONFIG", help="the daemon's TOML settings file")
]


def _file_info(path: Path | None) -> dict[str, Any]:
    """Whether a secret file is there and who may read it: from stat, without reading it."""
    if path is None:
        return {"path": None, "state": "not set"}
    try:
        st = path.stat()
    except FileNotFoundError:
        return {"path": str(path), "state": "missing"}
    except OSError as exc:
        return {"path": str(path), "state": f"cannot stat: {exc.strerror}"}
    kind = "folder" if stat.S_ISDIR(st.st_mode) else "file"
    state = "empty" if kind == "file" and st.st_size == 0 else "present"
    return {"path": str(path), "state": state, "kind": kind, "mode": f"{stat.S_IMODE(st.st_mode):04o}"}


def _warnings(cfg: DaemonConfig, secrets: dict[str, dict[str, Any]], env: dict[str, str]) -> list[str]:
    out: list[str] = []
    creds = env.get("CREDENTIALS_DIRECTORY", "")
    for name, info in secrets.items():
        path = info["path"]
        if info["state"] == "missing":
            if creds and path and path.startswith(creds):
                out.append(f"{name}: {path} does not exist here; systemd creates it from LoadCredential= at start")
            elif name == "ssh.key":
                out.append(f"{name}: {path} does not exist: the daemon cannot reach any host")
            else:
                out.append(f"{name}: {path} does not exist")
        elif info["state"] == "empty":
            out.append(f"{name}: {path} is empty")
        if info.get("kind") == "file" and int(info["mode"], 8) & 0o077:
            out.append(f"{name}: {path} is readable by group or others (mode {info['mode']}); use 0600")
    if not cfg.ssh.known_hosts.is_file():
        out.append(f"ssh.known_hosts: {cfg.ssh.known_hosts} does not exist: pin every host key first")
    signers = cfg.repo.allowed_signers
    if signers is not None and not signers.is_file():
        out.append(f"repo.allowed_signers: {signers} does not exist: every head would be refused")
    if cfg.repo.is_local and not Path(cfg.repo.url).exists():
        out.append(f"repo.url: {cfg.repo.url} does not exist on this machine")
    if cfg.http.enabled and not is_loopback(cfg.http.host_port[0]):
        out.append(f"http.listen: {cfg.http.listen} is not loopback: /status and /metrics are served without auth")
    if public_url(cfg.repo.url) != cfg.repo.url:
        out.append("repo.url carries a user:token: it is taken out of the URL and sent as an HTTP credential")
    if cfg.http.enabled and cfg.http.webhook_secret_file is None:
        out.append("http.webhook_secret_file is not set: POST /webhook is off (fetches still run every interval)")
    return out


PLACEHOLDER_HOSTS = ("example.com", "example.org", "example.net")
"""Names reserved for examples (RFC 2606): a repo.url on one is the example file's, not a remote."""
UNIT_CREDENTIALS = {"ssh-key": Path("/etc/lanes/credentials/ssh-key")}
"""LoadCredential= sources of systemd/lanes-reconciler.service given as paths; the others are named and
looked up in /etc/credstore/lanes.<name> (systemd.exec(5), LoadCredential=)."""
CREDSTORE = Path("/etc/credstore")


def _credential_source(path: Path, env: dict[str, str]) -> Path | None:
    """Where systemd copies `$CREDENTIALS_DIRECTORY/<name>` from at start (None: not a credential path)."""
    creds = env.get("CREDENTIALS_DIRECTORY", "")
    if not creds or path.parent != Path(creds):
        return None
    return UNIT_CREDENTIALS.get(path.name, CREDSTORE / f"lanes.{path.name}")


def _fatal(cfg: DaemonConfig, env: dict[str, str]) -> list[str]:
    """What keeps the unit from working at all (--systemd: the file checked as the service will read it)."""
    out = []
    url = cfg.repo.url.lower()
    if any(f"@{h}" in url or f"//{h}" in url or f".{h}" in url for h in PLACEHOLDER_HOSTS):
        out.append(f"repo.url: {public_url(cfg.repo.url)} is the example file's placeholder: set your state repo")
    key = cfg.ssh.key
    source = _credential_source(key, env)
    if source is not None and not source.exists():
        out.append(f"ssh.key: {key} comes from LoadCredential= {source}, which does not exist: the unit will not start")
    elif source is None and not key.exists():
        out.append(f"ssh.key: {key} does not exist: the daemon cannot reach any host")
    return out


def _print_human(cfg: DaemonConfig, path: Path, secrets: dict[str, dict[str, Any]], warnings: list[str]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[green]ok[/]: {path}")
    dumped = _shown(cfg)
    # Every section, as the daemon holds it (the hosts' overrides after them).
    for section in [name for name, value in dumped.items() if isinstance(value, dict) and name != "hosts"]:
        console.print(f"\n[bold]\\[{section}][/]")
        for key, value in dumped[section].items():
            console.print(f"{key} = {json.dumps(value)}" if value is not None else f"# {key}: not set")
    for host, override in dumped["hosts"].items():
        console.print(f"\n[bold]\\[hosts.{host}][/]")
        for key, value in override.items():
            console.print(f"{key} = {json.dumps(value)}")
    console.print("\n[bold]secret files[/] (named, never read)")
    for name, info in secrets.items():
        extra = f", {info['kind']} mode {info['mode']}" if "mode" in info else ""
        console.print(f"{name}: {info['path'] or '-'} ({info['state']}{extra})")
    for w in warnings:
        console.print(f"[yellow]warning[/]: {w}")


def _shown(cfg: DaemonConfig) -> dict[str, Any]:
    """The settings as printed: the repository URL without `user:token@`."""
    dumped = cfg.model_dump(mode="json")
    dumped["repo"]["url"] = public_url(cfg.repo.url)
    return dumped


def _problems(exc: ConfigError, *, systemd: bool, as_json: bool) -> NoReturn:
    """Every problem of the file (not the first alone), and --systemd where that is what is missing."""
    unset = sorted({name for p in exc.problems for name in SYSTEMD_ENV if f"${name} is not set" in p.message})
    hint = (
        f"{', '.join('$' + n for n in unset)} {'is' if len(unset) == 1 else 'are'} set by systemd for the unit: "
        "run `lanes config check --systemd` to check the file as the service reads it"
        if unset and not systemd
        else None
    )
    if as_json:
        extra: dict[str, Any] = {"file": exc.file, "line": exc.line, "field": exc.field}
        extra["problems"] = [
            {"error": p.message, "file": p.file, "line": p.line, "field": p.field} for p in exc.problems
        ]
        if hint:
            extra["hint"] = hint
        print(json.dumps(error_json(exc.describe(), EXIT_INPUT, **extra)))
    else:
        count = len(exc.problems)
        err_console().print(
            f"[bold red]error:[/] {escape(str(exc.file))}: {count} problem{'s' if count > 1 else ''}",
            highlight=False,
            soft_wrap=True,
        )
        for p in exc.problems:
            err_console().print(f"  {escape(p.describe())}", highlight=False, soft_wrap=True)
        if hint:
            err_console().print(f"[yellow]hint:[/] {escape(hint)}", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_INPUT)


@handle_errors
def config_check_cmd(
    config: ConfigOpt = DEFAULT_CONFIG,
    systemd: Annotated[
        bool,
        typer.Option(
            "--systemd",
            help="resolve defaults as the unit sees them ($STATE_DIRECTORY=/var/lib/lanes, "
            "$CREDENTIALS_DIRECTORY=/run/credentials/lanes-reconciler.service, ...)",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Validate the daemon's settings and print them as the daemon would use them: exit 0 fine, 2 bad input.

    Every problem of the file is listed (file:line: key: what is wrong); where a path uses a variable
    only systemd sets ($STATE_DIRECTORY, ...), it suggests --systemd.
    """
    env = dict(os.environ)
    if systemd:
        env.update(SYSTEMD_ENV)
    try:
        cfg = load_config(config, env=env)
    except ConfigError as exc:
        _problems(exc, systemd=systemd, as_json=as_json)
    secrets = {name: _file_info(p) for name, p in cfg.secret_paths().items()}
    warnings = _warnings(cfg, secrets, env)
    fatal = _fatal(cfg, env) if systemd else []
    if fatal:
        if as_json:
            extra = {"problems": [{"error": f} for f in fatal], "settings": _shown(cfg), "secret_files": secrets}
            print(json.dumps(error_json(fatal[0], EXIT_INPUT, file=str(config), warnings=warnings, **extra), indent=2))
        else:
            _print_human(cfg, config, secrets, warnings)
            for problem in fatal:
                err_console().print(f"[bold red]error:[/] {escape(problem)}", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INPUT)
    if as_json:
        out = {
            "ok": True,
            "exit_code": EXIT_OK,
            "file": str(config),
            "settings": _shown(cfg),
            "secret_files": secrets,
            "warnings": warnings,
        }
        print(json.dumps(out, indent=2))
    else:
        _print_human(cfg, config, secrets, warnings)
    raise typer.Exit(EXIT_OK)
