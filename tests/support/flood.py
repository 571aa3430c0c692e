"""Slow clients against an HTTP server on loopback: shared by the flood test and bench/http_flood.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Protocol


class Tally(Protocol):
    connections: int
    dropped: int
    answered: int
    refused: int


async def slow_client(port: int, upload: bool, stop: asyncio.Event, tally: Tally) -> None:
    """Dribbles a head (or stalls an upload) until the server drops it, then comes back 0.3 s later.

    A head gets one header line every 0.5 s; an upload sends all of a 1 MiB body but its last byte and
    then nothing: what costs a server memory.
    """
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            tally.refused += 1
            await asyncio.sleep(0.3)
            continue
        tally.connections += 1
        try:
            if upload:
                writer.write(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n")
                writer.write(b"x" * ((1 << 20) - 1))
            else:
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            while not stop.is_set():
                if not upload:
                    writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(4096), 0.5)
                except TimeoutError:
                    continue
                if data:
                    tally.answered += 1
                else:
                    tally.dropped += 1
                break
        except OSError:
            tally.dropped += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        await asyncio.sleep(0.3)


def proc_figures(pid: int) -> tuple[int, int]:
    """(RSS in bytes, open descriptors) of a process, from /proc; zeros once it is gone."""
    rss = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        fds = 0
    return rss, fds
