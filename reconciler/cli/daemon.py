"""`lanes daemon` and `lanes init`: run the reconciler as a service; start a state repo."""

from __future__ import annotations

import asyncio
import shutil
import sys
from importlib import resources
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
    directory: Annotated[Path, typer.Argument(help="folder of the new state repository")],
) -> None:
    """Scaffold a state repository (state/, policies/, a README) for a team's own fleet."""
    if directory.exists() and any(directory.iterdir()):
        raise InputError("folder exists and is not empty; choose a new one", file=str(directory))
    scaffold = resources.files("reconciler") / "scaffold"
    with resources.as_file(scaffold) as src:
        shutil.copytree(src, directory, dirs_exist_ok=True, symlinks=False)
    import pygit2

    pygit2.init_repository(str(directory), initial_head="main")
    print(f"state repository scaffolded in {directory}")
    print(f"next: edit state/hosts and state/lanes, `git add -A && git commit`, then `lanes check --repo {directory}`")
