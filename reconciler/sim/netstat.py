"""Listening TCP ports by local address, read from /proc/net/tcp, shared by the simulated hosts of a process.

Each simulated host owns one loopback address, so the sockets listening on
it are exactly that host's: its SSH server and its engines. Reading the
kernel's table is what makes the probe honest (a stand-in that failed to
bind is not listening), but the table lists every socket of the machine:
with a thousand hosts and the daemon's thousand connections to them it is
some 4,000 lines, about 10 ms to read and parse, once per host per resync.
So a fleet may share one table among its hosts and let it be `max_age_s`
old; whatever the simulator itself changes (a container started or ended,
an SSH server stopped) calls `invalidate()`, so only changes it cannot see
(a crash, a delayed bind) wait for the age limit. The default age, 0, reads
the table on every call, as a host would.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

PROC_NET_TCP = Path("/proc/net/tcp")
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp


class ListeningTable:
    def __init__(self, max_age_s: float = 0.0, path: Path = PROC_NET_TCP) -> None:
        self.max_age_s = max_age_s
        self.path = path
        self.reads = 0  # how often the kernel's table was read, for tests and benchmarks
        self._by_address: dict[str, set[int]] | None = None
        self._read_at = 0.0

    def ports(self, address: str) -> list[int]:
        """TCP ports listening on `address` (IPv4, as bound: a socket on 0.0.0.0 is not counted)."""
        if self._by_address is None or time.monotonic() - self._read_at >= self.max_age_s:
            self._by_address = self._read()
            self._read_at = time.monotonic()
        wanted = socket.inet_aton(address)[::-1].hex().upper()
        return sorted(self._by_address.get(wanted, ()))

    def invalidate(self) -> None:
        self._by_address = None

    def _read(self) -> dict[str, set[int]]:
        self.reads += 1
        table: dict[str, set[int]] = {}
        try:
            lines = self.path.read_text().splitlines()[1:]
        except OSError:
            return table
        for line in lines:
            # "sl local_address rem_address st ...": only the first four columns are needed.
            fields = line.split(None, 4)
            if len(fields) > 3 and fields[3] == _LISTEN:
                addr, _, port = fields[1].partition(":")
                table.setdefault(addr, set()).add(int(port, 16))
        return table
