"""`lanes daemon` and `lanes init`: run the reconciler as a service; start a state repo."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from reconciler.cli.common import handle_errors
from reconciler.daemon.config import DEFAULT_CONFIG, load_config
from reconciler.errors import InputError
from reconciler.execute.secrets import secret_values
from reconciler.logsetup import configure


@handle_errors
def daemon_cmd(
    config: Annotated[Path, typer.Option("--config", help="TOML settings (see systemd/reconciler.toml.example)")] = (
        DEFAULT_CONFIG
    ),
) -> None:
    """Keep the fleet converged toward the newest commit of the configured branch."""
    from reconciler.daemon.service import Daemon

    settings = load_config(config)
    configure(settings.daemon.log_level, stream=sys.stdout, secrets=secret_values(settings))
    code = asyncio.run(Daemon(settings, config).run())
    raise typer.Exit(code)


@handle_errors
def init_cmd(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="folder of the new state repository")],
) -> None:
    """Start a state repository: state/, policies/, schemas/, a CI workflow and a pre-commit hook, committed.

    `lanes check --repo DIR` passes on it at once; edit state/hosts and state/lanes, commit, check again.
    """
    from reconciler.cli.initrepo import init_repository

    if directory.exists() and any(directory.iterdir()):
        raise InputError("folder exists and is not empty; choose a new one", file=str(directory))
    commit = init_repository(directory)
    print(f"state repository started in {directory}: first commit {commit[:12]} on main")
    print("  schemas/ for your editor, .github/workflows/lanes-check.yml (GitHub, Gitea, Forgejo Actions),")
    print("  hooks/pre-commit (core.hooksPath = hooks: a clone runs `git config core.hooksPath hooks` once)")
    print(f"next: edit state/hosts and state/lanes, commit, then `lanes check --repo {directory}`")
