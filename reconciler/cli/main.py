"""The `lanes` command line: one typer app, one module per group of commands.

The `lanes` script builds the app with the one command its arguments name (`run`): a command imports
what it needs and no other command's machinery (at 1,000 lanes `lanes check` spent 0.7 s of CPU importing
every command's modules, the SSH transport and the daemon's among them, for 0.7 s of checking). With no
command named (`lanes --help`, completion) and for whoever imports `app`, every command is there.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module, metadata
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.core
import typer.main
from typer._click import exceptions as click_errors

from reconciler.cli import exitcodes
from reconciler.cli.common import error_json
from reconciler.logsetup import configure, redact_stdio


def _tidy_help(command: Any) -> None:
    """Help shows `--json`, `--repo TEXT`, `LANE`, not `--json <bool>` or `{lane}`.

    Typer 0.29 prints each option's type as `<bool>`/`<str>` unless a metavar is set
    (`TyperOption.display_type_rich`, typer/core.py); flags get none, values their kind.
    """
    for param in command.params:
        if param.metavar is not None:
            continue
        # Typer 0.29 carries its own click (typer._click): its parameters are told apart by name.
        if param.param_type_name == "option" and getattr(param, "is_flag", False):
            param.metavar = ""
        elif param.param_type_name == "argument":
            param.metavar = (param.name or "arg").upper()
        else:
            kind = param.bare_type()  # str, int, float, Path, ...
            param.metavar = {"Path": "PATH", "int": "N", "float": "SECONDS"}.get(kind, param.name.upper())
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)  # made per context by click, so tidied as it is made
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        _tidy_help(sub)


class LanesTyper(typer.Typer):
    """The app as the `lanes` script runs it: help tidied before click parses anything."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        command = typer.main.get_command(self)
        _tidy_help(command)
        return command(*args, **kwargs)


class LanesGroup(typer.core.TyperGroup):
    """The top command: with `--json`, a usage error (an unknown option, a missing argument, a bad value)
    is the one JSON error shape too, on stdout with exit 2, where click would print text before any
    command runs. Everything else goes as click's standalone mode has it (typer 0.29 `core._main`)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or "--json" not in argv:
            return super().main(argv, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(argv, prog_name, complete_var, False, **extra)
        except click_errors.UsageError as exc:
            usage = exc.ctx.get_usage() if exc.ctx is not None else None
            print(json.dumps(error_json(exc.format_message(), exitcodes.BAD_INPUT, usage=usage)))
            sys.exit(exitcodes.BAD_INPUT)
        except click_errors.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except typer.Abort:
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else exitcodes.OK)  # a command's typer.Exit(code) comes back as code


def _version(value: bool) -> None:
    if value:
        try:
            print(f"lanes {metadata.version('spark-lanes')}")
        except metadata.PackageNotFoundError:  # run from a checkout that was never installed
            print("lanes (not installed: no version)")
        raise typer.Exit(exitcodes.OK)


def main(
    log_level: Annotated[
        str,
        typer.Option("--log-level", envvar="LANES_LOG_LEVEL", help="debug, info, warning, error (logs go to stderr)"),
    ] = "warning",
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, metavar="", help="print the version and exit"),
    ] = False,
) -> None:
    """GitOps reconciler for LLM inference lanes on DGX Spark (GB10) fleets."""
    configure(log_level)
    redact_stdio()  # what a command prints (remote output, log tails) is redacted like its logs


COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "check"),
    "plan": ("reconcile", "plan_cmd"),
    "apply": ("reconcile", "apply_cmd"),
    "status": ("reconcile", "status_cmd"),
    "hosts": ("hosts", "hosts_cmd"),
    "retry": ("reconcile", "retry_cmd"),
    "suspend": ("operate", "suspend_cmd"),
    "resume": ("operate", "resume_cmd"),
    "reconcile": ("operate", "reconcile_cmd"),
    "wait": ("operate", "wait_cmd"),
    "logs": ("operate", "logs_cmd"),
    "allow-rewind": ("rewind", "allow_rewind_cmd"),
    "demo": ("demo", "demo"),
    "daemon": ("daemon", "daemon_cmd"),
    "init": ("daemon", "init_cmd"),
    "history": ("history", "history_cmd"),
    "bench": ("bench", "bench_cmd"),
    "upstream": ("upstream", "upstream_cmd"),
    "propose": ("upstream", "propose_cmd"),
    "schema": ("schema", "schema"),
}
"""Each command: the module of `reconciler.cli` that holds it, and its function (in `lanes --help` order)."""
GROUPS: dict[str, tuple[str, dict[str, tuple[str, str]]]] = {
    "model": (
        "Model files: figures and manifests from a checkpoint; model files on the hosts.",
        {
            "describe": ("schema", "model_describe"),
            "manifest": ("modelmanifest", "model_manifest"),
            "status": ("models", "model_status_cmd"),
            "unused": ("models", "model_unused_cmd"),
            "remove": ("models", "model_remove_cmd"),
            "sync": ("modelsync", "model_sync_cmd"),
        },
    ),
    "config": ("The daemon's settings file.", {"check": ("config", "config_check_cmd")}),
}
"""Commands with subcommands (`lanes model status`), each with its help line."""


def _function(where: tuple[str, str]) -> Callable[..., Any]:
    function: Callable[..., Any] = getattr(import_module(f"reconciler.cli.{where[0]}"), where[1])
    return function


def build(only: str | None = None) -> LanesTyper:
    """The app with every command, or with the one command (or group) `only` names."""
    built = LanesTyper(
        cls=LanesGroup,
        name="lanes",
        help="GitOps reconciler for LLM inference lanes on DGX Spark (GB10) fleets.",
        epilog=exitcodes.epilog(),
        no_args_is_help=True,
        add_completion=True,  # --install-completion and --show-completion for bash, zsh and fish (typer)
        pretty_exceptions_enable=False,
    )
    built.callback()(main)
    for name, where in COMMANDS.items():
        if only is None or only == name:
            built.command(name)(_function(where))
    for name, (help_text, subcommands) in GROUPS.items():
        if only is None or only == name:
            group = typer.Typer(help=help_text, no_args_is_help=True)
            for sub, where in subcommands.items():
                group.command(sub)(_function(where))
            built.add_typer(group, name=name)
    return built


def named_command(argv: Sequence[str]) -> str | None:
    """The command `argv` (without the program) names, when it names one lanes has; else None.

    Only `--log-level` of the top options takes a value; anything else starting with `-` is a flag."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS or word in GROUPS else None
    return None


QUICK_EXIT = frozenset({"check"})
"""Commands that read and print, and leave nothing to finish at exit (no thread, no temporary file, no write):
their process ends with `os._exit` once its output is flushed. The interpreter's teardown frees a 1,000-lane
commit's million objects one at a time, 0.1-0.2 s of `lanes check`'s second (issue 27)."""


def run() -> Any:
    """The `lanes` script: the app with the command its arguments name alone."""
    named = named_command(sys.argv[1:])
    command = build(named)
    if named not in QUICK_EXIT:
        return command()
    try:
        command()
    except SystemExit as done:
        code = done.code
    else:
        code = 0
    if not isinstance(code, int | None):
        raise SystemExit(code)  # a message: Python prints it and exits 1, the usual way
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (`lanes check --json | head`): Python's own way out says so
        raise SystemExit(code) from None
    os._exit(code or 0)


_full: LanesTyper | None = None


def __getattr__(name: str) -> Any:
    """`app`, every command registered, built on first use (tests and docs read it; `run` does not)."""
    global _full  # noqa: PLW0603 - one app per process, built when first asked for
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _full is None:
        _full = build()
    return _full


if TYPE_CHECKING:
    app: LanesTyper


if __name__ == "__main__":
    run()
