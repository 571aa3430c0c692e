"""One writer of lane state: only `reconciler.store.lanewriter` writes a lane's row or runs the lane machine.

Read from the source, as tests/test_no_timed_assertions.py reads the tests: a module that calls
`update_lane(` or `transition(` elsewhere is named with its line. Tests may seed journals directly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2] / "reconciler"
WRITER = ROOT / "store" / "lanewriter.py"
CALLS = re.compile(r"(?<![\w`])(?:\w+\.)*(update_lane|transition)\(")
ALLOWED = {("update_lane", WRITER), ("transition", WRITER)}
"""The writer itself; `transition` is also defined (not called) in reconciler/lane/machine.py."""


def _calls() -> list[str]:
    found: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("def ", "async def ", "#")):
                continue
            where = f"{path.relative_to(ROOT.parent)}:{number}: {stripped}"
            found.extend(where for match in CALLS.finditer(line) if (match.group(1), path) not in ALLOWED)
    return found


def test_only_the_lane_writer_writes_lane_state() -> None:
    assert _calls() == []
