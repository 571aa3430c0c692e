"""Running the `lanes` command the way an operator does, and reading what it prints."""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rig.machine import LANES_ENV, RigError, sh

LANES = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "lanes"


@dataclass
class LaneRun:
    """One `lanes` invocation."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> dict[str, Any]:
        # The one JSON object starts at a line that is "{": structlog lines may precede it
        # (the CLI does not configure structlog, whose default logger prints to stdout).
        start = 0 if self.stdout.startswith("{") else self.stdout.find("\n{") + 1
        try:
            data: dict[str, Any] = json.loads(self.stdout[start:])
        except ValueError as exc:
            raise AssertionError(f"no JSON object from this run:\n{self.describe()}") from exc
        return data

    def describe(self) -> str:
        return (
            f"$ {shlex.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
            f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-4000:]}"
        )


def run_lanes(args: Sequence[str], *, cwd: Path, timeout: float = 240.0) -> LaneRun:
    argv = [str(LANES), *args]
    t0 = time.monotonic()
    result = sh(argv, check=False, timeout=timeout, cwd=cwd, env=LANES_ENV)
    return LaneRun(argv, result.returncode, result.stdout, result.stderr, time.monotonic() - t0)


def run_lanes_watching(
    args: Sequence[str], on_progress: Callable[[str], None], *, cwd: Path, timeout: float = 240.0
) -> LaneRun:
    """Like `run_lanes`, calling `on_progress` with each line of progress (stderr) as it is printed."""
    argv = [str(LANES), *args]
    t0 = time.monotonic()
    lines: list[str] = []
    with (
        tempfile.TemporaryFile("w+") as out,
        subprocess.Popen(
            argv, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=cwd, env=LANES_ENV
        ) as proc,
    ):
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                lines.append(line)
                on_progress(line)
                if time.monotonic() - t0 > timeout:
                    raise RigError(f"{shlex.join(argv)} ran over {timeout} s")
            proc.wait(timeout=max(timeout - (time.monotonic() - t0), 1))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out.seek(0)
        return LaneRun(argv, proc.returncode, out.read(), "".join(lines), time.monotonic() - t0)
