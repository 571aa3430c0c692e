"""The `lanes` command line: one typer app, one module per group of commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Annotated, Any

import typer
import typer.core
import typer.main
from typer._click import exceptions as click_errors

from reconciler.cli import bench as bench_cli
from reconciler.cli import check as check_cmd
from reconciler.cli import config as config_cmd
from reconciler.cli import daemon as daemon_cmd
from reconciler.cli import demo as demo_cmd
from reconciler.cli import exitcodes
from reconciler.cli import history as history_cmd
from reconciler.cli import hosts as hosts_cmd
from reconciler.cli import modelmanifest as modelmanifest_cmd
from reconciler.cli import models as models_cmd
from reconciler.cli import modelsync as modelsync_cmd
from reconciler.cli import operate as operate_cmd
from reconciler.cli import reconcile as reconcile_cmd
from reconciler.cli import rewind as rewind_cmd
from reconciler.cli import schema as schema_cmd
from reconciler.cli import upstream as upstream_cmd
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


app = LanesTyper(
    cls=LanesGroup,
    name="lanes",
    help="GitOps reconciler for LLM inference lanes on DGX Spark (GB10) fleets.",
    epilog=exitcodes.epilog(),
    no_args_is_help=True,
    add_completion=True,  # --install-completion and --show-completion for bash, zsh and fish (typer)
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        try:
            print(f"lanes {metadata.version('spark-lanes')}")
        except metadata.PackageNotFoundError:  # run from a checkout that was never installed
            print("lanes (not installed: no version)")
        raise typer.Exit(exitcodes.OK)


@app.callback()
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


app.command("check")(check_cmd.check)
app.command("plan")(reconcile_cmd.plan_cmd)
app.command("apply")(reconcile_cmd.apply_cmd)
app.command("status")(reconcile_cmd.status_cmd)
app.command("hosts")(hosts_cmd.hosts_cmd)
app.command("retry")(reconcile_cmd.retry_cmd)
app.command("suspend")(operate_cmd.suspend_cmd)
app.command("resume")(operate_cmd.resume_cmd)
app.command("reconcile")(operate_cmd.reconcile_cmd)
app.command("wait")(operate_cmd.wait_cmd)
app.command("logs")(operate_cmd.logs_cmd)
app.command("allow-rewind")(rewind_cmd.allow_rewind_cmd)
app.command("demo")(demo_cmd.demo)
app.command("daemon")(daemon_cmd.daemon_cmd)
app.command("init")(daemon_cmd.init_cmd)
app.command("history")(history_cmd.history_cmd)
app.command("bench")(bench_cli.bench_cmd)
app.command("upstream")(upstream_cmd.upstream_cmd)
app.command("propose")(upstream_cmd.propose_cmd)
app.command("schema")(schema_cmd.schema)
model_app = typer.Typer(
    help="Model files: figures and manifests from a checkpoint; model files on the hosts.", no_args_is_help=True
)
model_app.command("describe")(schema_cmd.model_describe)
model_app.command("manifest")(modelmanifest_cmd.model_manifest)
model_app.command("status")(models_cmd.model_status_cmd)
model_app.command("unused")(models_cmd.model_unused_cmd)
model_app.command("remove")(models_cmd.model_remove_cmd)
model_app.command("sync")(modelsync_cmd.model_sync_cmd)
app.add_typer(model_app, name="model")
config_app = typer.Typer(help="The daemon's settings file.", no_args_is_help=True)
config_app.command("check")(config_cmd.config_check_cmd)
app.add_typer(config_app, name="config")


if __name__ == "__main__":
    app()
