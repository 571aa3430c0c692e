"""The `lanes` script builds its app with the one command it is asked for (`reconciler.cli.main.run`).

At 1,000 lanes `lanes check` spent as much CPU importing every command's modules (the SSH transport, the
daemon's settings, the upstream poller and its HTTP client, sqlite-utils) as checking (issue 27). Checked
in a fresh interpreter: a later top-level import on the command's path cannot bring them back unseen. Nor
does `--json` import rich (structlog's import reached for it: about 70 ms; `reconciler/cli/__init__.py`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli.main import COMMANDS, GROUPS, app, build, named_command

ROOT = Path(__file__).resolve().parents[2]
CHECK_JSON = ["lanes", "--log-level", "error", "check", "--repo", str(ROOT), "--json"]


def run_lanes_in(code: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter runs `code`, then the `lanes` script's `run` with `argv`."""
    code += f"import sys\nfrom reconciler.cli.main import run\nsys.argv = {argv!r}\nrun()\n"
    return subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=cwd
    )


NOT_FOR_CHECK = (
    "asyncssh",
    "httpx",
    "sqlite_utils",
    "reconciler.execute",
    "reconciler.transport",
    "reconciler.daemon",
    "rich",
    "pygments",
)


def test_lanes_check_imports_no_other_command_s_machinery(tmp_path: Path) -> None:
    seen = tmp_path / "modules.json"
    code = (
        "import json, os, sys\n"
        f"names = {NOT_FOR_CHECK!r}\n"
        "end = os._exit\n"  # `lanes check` ends its process so, with no teardown (QUICK_EXIT)
        "def record(code):\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps(sorted(n for n in names if n in sys.modules)))\n"
        "    end(code)\n"
        "os._exit = record\n"
    )
    out = run_lanes_in(code, CHECK_JSON, tmp_path)
    assert out.returncode in (0, 1), out.stderr  # the example state may warn or deny; it is checked either way
    assert json.loads(out.stdout)["commit"]
    assert json.loads(seen.read_text()) == []


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["check", "--json"], "check"),
        (["--log-level", "debug", "plan"], "plan"),
        (["--log-level=debug", "status"], "status"),
        (["model", "status"], "model"),
        (["--help"], None),
        ([], None),
        (["no-such-command"], None),
        (["--log-level", "check"], None),  # "check" is the option's value here, not a command
    ],
)
def test_the_command_named_is_the_first_word_that_is_not_an_option_or_its_value(
    argv: list[str], named: str | None
) -> None:
    assert named_command(argv) == named


def test_one_command_s_app_has_that_command_and_the_whole_app_has_every_one() -> None:
    import typer.main

    whole = typer.main.get_command(app)
    assert list(whole.commands) == [*COMMANDS, *GROUPS]  # type: ignore[attr-defined]
    for name in [*COMMANDS, *GROUPS]:
        alone = typer.main.get_command(build(name))
        assert list(alone.commands) == [name]  # type: ignore[attr-defined]


def test_lanes_check_ends_once_its_output_is_flushed_without_the_interpreter_s_teardown(tmp_path: Path) -> None:
    """Its whole JSON is out, its exit code kept; what waits for the interpreter's exit (atexit) never runs:
    `lanes check` leaves nothing to finish, and the teardown was 0.1-0.2 s of its second at 1,000 lanes."""
    code = "import atexit, sys\natexit.register(lambda: sys.stderr.write('teardown ran\\n'))\n"
    out = run_lanes_in(code, CHECK_JSON, tmp_path)
    assert out.returncode == json.loads(out.stdout)["exit_code"]
    assert "teardown ran" not in out.stderr
    other = run_lanes_in(code, ["lanes", "--version"], tmp_path)  # the other commands end as Python does
    assert other.returncode == 0 and "teardown ran" in other.stderr
