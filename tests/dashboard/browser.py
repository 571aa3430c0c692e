"""Debian's chromium, headless, as the dashboard tests drive it: the rendered DOM of a page, and screenshots.

Each call starts one browser with a fresh profile folder and the flags that keep it off the network
(no background requests, no component updates, no sync): it only ever loads the loopback URL given.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",  # tests run as root in CI, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--hide-scrollbars",
)
TIMEOUT_S = 60.0


def need_chromium() -> None:
    """Skip without chromium; fail instead where it must be there (CI sets LANES_REQUIRE_CHROMIUM, .ci/run)."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.environ.get("LANES_REQUIRE_CHROMIUM"):
            pytest.fail(f"chromium is not installed ({CHROMIUM}) and LANES_REQUIRE_CHROMIUM is set (CI)")
        pytest.skip(f"chromium is not installed ({CHROMIUM}): `apt-get install -y chromium` (scripts/setup, as root)")


async def _run(*args: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="lanes-chromium-") as profile:
        proc = await asyncio.create_subprocess_exec(
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
        finally:
            if proc.returncode is None:  # timed out: the whole browser (its helpers too) goes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
        return out


async def dump_dom(url: str) -> str:
    """The DOM after the page loaded, serialized (what the browser built, not the bytes it was sent)."""
    return (await _run("--dump-dom", url)).decode()


async def screenshot(url: str, path: Path, width: int, height: int) -> Path:
    await _run(f"--screenshot={path}", f"--window-size={width},{height}", url)
    assert (await asyncio.to_thread(path.read_bytes))[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    print(f"screenshot: {path}")  # the test's artifact: where to look
    return path
