"""run_streaming: a program cancelled or timed out goes with everything it started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.execute.subproc import SubprocessTimeoutError, run_streaming

pytestmark = pytest.mark.timeout(60)


def alive(pid: int) -> bool:
    """A process with this pid exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "zombie" not in status.lower()


def running(text: str) -> bool:
    """Some process's command line holds `text`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    return True
    return False


def child_pid(marker: Path) -> int:
    """The pid the program wrote once it had started its child (waited for with the loop blocked, on purpose)."""
    for _ in range(500):
        text = marker.read_text().strip() if marker.exists() else ""
        if text:
            return int(text)
        time.sleep(0.01)
    raise AssertionError("the program never started its child")


@contextlib.contextmanager
def killed_after(pids: list[int]) -> Iterator[None]:
    """Whatever the test's outcome, the processes it started are killed by their pids."""
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def with_child(marker: Path, before: str = "") -> list[str]:
    """A program that starts a long child, writes the child's pid to `marker`, and waits for it."""
    return ["sh", "-c", f"{before}sleep 3600 & echo $! > {marker}; wait"]


async def cancelled(task: asyncio.Task[object]) -> None:
    """Cancel `task` and wait for it to end cancelled (bounded, so a hang fails the test)."""
    task.cancel()
    async with asyncio.timeout(30):
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_cancel_that_lands_while_the_program_starts_kills_its_child_too(tmp_path: Path) -> None:
    # rsync starts its ssh at once; a cancel landing before asyncio has connected rsync's pipes used to kill
    # rsync alone, then wait for pipes the orphaned ssh still held: the cancel hung and ssh lived on.
    marker = tmp_path / "child.pid"
    task = asyncio.create_task(run_streaming(with_child(marker), timeout=600))
    for _ in range(100):  # one loop step at a time, until the step that spawned the program
        await asyncio.sleep(0)
        if running(str(marker)):
            break
    pids: list[int] = []
    with killed_after(pids):
        # The loop stays blocked while the program starts its child, so the cancel lands before asyncio has
        # connected the program's pipes (the step after the spawn).
        pids.append(child_pid(marker))
        await cancelled(task)
        assert not alive(pids[0])


async def test_a_cancel_while_it_runs_kills_the_program_and_its_child(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    task = asyncio.create_task(run_streaming(with_child(marker), timeout=600))
    pids: list[int] = []
    with killed_after(pids):
        for _ in range(500):
            if marker.exists() and marker.read_text().strip():
                break
            await asyncio.sleep(0.02)
        pids.append(int(marker.read_text()))
        await cancelled(task)
        assert not alive(pids[0])


async def test_a_timeout_kills_the_program_and_its_child_and_keeps_its_stderr(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    program = with_child(marker, before="echo starting >&2; ")
    pids: list[int] = []
    with killed_after(pids):
        # Long enough that the program has started its child before the deadline, even on a loaded machine.
        with pytest.raises(SubprocessTimeoutError) as caught:
            await run_streaming(program, timeout=5.0)
        pids.append(int(marker.read_text()))
        assert not alive(pids[0])
    assert "starting" in caught.value.stderr
    assert "did not finish within 5 s" in str(caught.value)
