"""No test asserts how long something took: figures of speed belong to bench/ scripts.

On a loaded 2-core machine a process can stall for a second, so a test that
compares a duration with a bound refuses good changes at random. This reads
every test module's syntax tree and finds each `assert` that compares a
duration: a subtraction with a clock reading on one side (`time.monotonic()`,
`time.perf_counter()`, `time.time()`, `loop.time()`), or a name bound to a
clock reading or to such a subtraction (`t0 = time.monotonic()`,
`waited = time.monotonic() - t0`). A timestamp checked against the clock
(`before <= row.updated <= time.time()`) is no duration and passes; so does a
wait bounded by a deadline, which is a loop, not an assert.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

TESTS = Path(__file__).parent
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}


def is_clock(node: ast.AST) -> bool:
    """`time.monotonic()`, `loop.time()`, `perf_counter()` and the like: a reading of a clock."""
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in CLOCKS


def timed_names(tree: ast.AST) -> set[str]:
    """Names bound to a clock reading or to a duration, anywhere in the module (twice: a duration of a reading)."""
    names: set[str] = set()
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1]
    for _ in range(2):
        for node in assigns:
            target = node.targets[0]
            if isinstance(target, ast.Name) and (is_clock(node.value) or is_duration(node.value, names)):
                names.add(target.id)
    return names


def is_timed(node: ast.AST, names: set[str]) -> bool:
    return is_clock(node) or (isinstance(node, ast.Name) and node.id in names)


def is_duration(node: ast.AST, names: set[str]) -> bool:
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Sub)
        and (is_timed(node.left, names) or is_timed(node.right, names))
    )


def timed_asserts(source: str) -> list[int]:
    """Line numbers of the asserts in `source` that compare a duration with a bound."""
    tree = ast.parse(source)
    names = timed_names(tree)
    durations = {n for n in names if not any(is_clock(a.value) for a in _bindings(tree, n))}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (c for c in ast.walk(node.test) if isinstance(c, ast.Compare)):
            if not any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in compare.ops):
                continue
            sides = [compare.left, *compare.comparators]
            if any(
                is_duration(part, names) or (isinstance(part, ast.Name) and part.id in durations)
                for side in sides
                for part in ast.walk(side)
            ):
                found.append(node.lineno)
                break
    return found


def _bindings(tree: ast.AST, name: str) -> list[ast.Assign]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == name
    ]


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("t0 = time.monotonic()\nassert time.monotonic() - t0 < 0.05\n", [2]),
        ("t0 = loop.time()\nassert loop.time() - t0 < 30\n", [2]),
        ("s = time.monotonic()\nwaited = time.monotonic() - s\nassert ok and waited < 3, waited\n", [3]),
        ("t0 = time.perf_counter()\nassert x\nassert time.perf_counter() - t0 >= 1.5\n", [3]),
        ("before = time.time()\nassert before <= row.updated <= time.time()\n", []),
        ("deadline = time.monotonic() + 10\nassert time.monotonic() < deadline, 'timed out'\n", []),
        ("assert abs(free - vfs.f_bavail * vfs.f_frsize) < 64 << 20\n", []),
        ("t0 = time.monotonic()\nwhile time.monotonic() - t0 < 3.5:\n    pass\n", []),
    ],
)
def test_the_finder_tells_a_duration_from_a_timestamp(source: str, lines: list[int]) -> None:
    assert timed_asserts(source) == lines


def test_no_test_asserts_a_duration() -> None:
    found = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != Path(__file__).name
        for line in timed_asserts(path.read_text())
    }
    assert not found, sorted(found)
