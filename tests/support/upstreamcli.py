"""`lanes upstream` and `lanes propose` in this process, as reconciler.cli.main mounts them, for CliRunner."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from reconciler.cli.upstream import propose_cmd, upstream_cmd
from reconciler.logsetup import configure

app = typer.Typer()


@app.callback()
def main() -> None:
    """As reconciler.cli.main does: logs to stderr, so --json owns stdout."""
    configure("warning")


app.command("upstream")(upstream_cmd)
app.command("propose")(propose_cmd)
runner = CliRunner()
