"""Fixtures of the rig tier: one rig per session, a clean fleet per test, the tier's time printed at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.rig.machine import cleanup_stale, ensure_packages, netns_reason, rig_unavailable_reason
from tests.rig.rig import Rig

_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def rig_session() -> Iterator[Rig]:
    _TIMES["start"] = time.monotonic()
    reason = rig_unavailable_reason()
    if reason:
        pytest.skip(reason)
    ensure_packages()
    reason = netns_reason()
    if reason:
        pytest.skip(reason)
    cleanup_stale()  # whatever a crashed earlier rig left behind
    rig = Rig()
    try:
        rig.setup()
        _TIMES["ready"] = time.monotonic()
        yield rig
    finally:
        t0 = time.monotonic()
        problems = rig.teardown()
        _TIMES["teardown"] = time.monotonic() - t0
        _TIMES["end"] = time.monotonic()
        if problems:
            raise RuntimeError("rig teardown left problems: " + "; ".join(problems))


@pytest.fixture
def rig(rig_session: Rig, request: pytest.FixtureRequest) -> Rig:
    """The session's rig with every link up, no container on any host and a fresh journal."""
    rig_session.reset(request.node.name)
    return rig_session


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if "start" not in _TIMES:
        return
    end = _TIMES.get("end", time.monotonic())
    parts = [f"lanes rig tier: {end - _TIMES['start']:.1f} s wall"]
    if "ready" in _TIMES:
        parts.append(f"setup {_TIMES['ready'] - _TIMES['start']:.1f} s")
    if "teardown" in _TIMES:
        parts.append(f"teardown {_TIMES['teardown']:.1f} s")
    terminalreporter.write_line(", ".join(parts))
