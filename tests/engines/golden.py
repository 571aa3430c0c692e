"""Golden files of rendered `docker run` argv lists: one file per lane, one argument per line.

A change to what a renderer emits shows up as a readable diff of these
files in review. To accept an intended change, run the engine tests with
LANES_UPDATE_GOLDEN=1 and read the diff before committing it.
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from reconciler.engines import ContainerSpec
from reconciler.facts.docker import run_argv

GOLDEN = Path(__file__).parent / "golden"


def as_text(specs: Sequence[ContainerSpec]) -> str:
    out = []
    for rank, spec in enumerate(specs):
        out.append(f"# rank {rank}: {spec.name}")
        out.extend(shlex.quote(arg) for arg in run_argv(spec))
    return "\n".join(out) + "\n"


def assert_golden(name: str, specs: Sequence[ContainerSpec]) -> None:
    path = GOLDEN / f"{name}.txt"
    text = as_text(specs)
    if os.environ.get("LANES_UPDATE_GOLDEN") == "1":
        path.write_text(text)
        return
    want = path.read_text() if path.exists() else ""
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), str(path), "rendered"))
        raise AssertionError(f"{name} renders otherwise than its golden file (LANES_UPDATE_GOLDEN=1 accepts):\n{diff}")
