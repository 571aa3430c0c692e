"""`lanes --help` as the `lanes` script prints it: proper metavars, the exit codes, completion, --version."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", *args, "--help"], capture_output=True, text=True, env=env,
        timeout=50, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("command", [(), ("plan",), ("apply",), ("history",), ("retry",), ("config", "check")])
def test_help_shows_no_type_placeholders(command: tuple[str, ...]) -> None:
    text = _help(*command)
    assert "<bool>" not in text and "<str>" not in text.split("Options")[-1] and "{lane}" not in text


def test_help_names_values_and_says_what_apply_needs() -> None:
    plan = _help("plan")
    assert "--lane" in plan and "NAME" in plan and "--db" in plan and "PATH" in plan
    assert "LANE" in _help("history").split("Options")[0]
    apply = " ".join(_help("apply").split())
    assert "--yes" in apply and "needed without a terminal and with --json" in apply
    top = _help()
    assert "--version" in top and "--install-completion" in top and "Exit codes" in top
