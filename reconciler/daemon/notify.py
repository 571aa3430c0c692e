"""sd_notify without libsystemd: readiness, status, watchdog, reload and stop to systemd.

The protocol is one datagram of newline-separated `KEY=VALUE` lines sent to
the AF_UNIX socket named by `$NOTIFY_SOCKET` (a path, or `@name` for the
abstract namespace). With `Type=notify` systemd waits for `READY=1`;
`WATCHDOG=1` must arrive within `WatchdogSec=` (`$WATCHDOG_USEC`) or the
service is killed and restarted; `RELOADING=1` must carry `MONOTONIC_USEC=`
(CLOCK_MONOTONIC in microseconds) so `systemctl reload` can tell this reload
from an earlier one; `EXTEND_TIMEOUT_USEC=` buys time while stopping.

Outside systemd (no `$NOTIFY_SOCKET`) every call is a no-op, so the daemon
runs the same by hand. A failed send is logged and returned as False, never
raised: the service manager missing one STATUS line must not stop a rollback.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

import structlog

log = structlog.get_logger("lanes.notify")

SEND_TIMEOUT_S = 2.0


def _address(value: str) -> str | None:
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # vsock: and other transports are for VMs; not ours


class Notifier:
    """Talks to the service manager named by `$NOTIFY_SOCKET`, or to nobody."""

    def __init__(self, socket_path: str | None, *, watchdog_usec: int | None = None) -> None:
        self.socket_path = socket_path or None
        self._address = _address(socket_path) if socket_path else None
        if socket_path and self._address is None:
            log.warning("notify.unsupported_socket", socket=socket_path)
        self._watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, unset: bool = False) -> Notifier:
        """Read `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID`.

        `unset=True` removes them from `os.environ` afterwards (like sd_notify's
        `unset_environment`), so child processes (ssh-keygen, gpg) do not inherit them.
        """
        source = os.environ if env is None else env
        path = source.get("NOTIFY_SOCKET") or None
        watchdog: int | None = None
        usec = source.get("WATCHDOG_USEC", "")
        pid = source.get("WATCHDOG_PID", "")
        if usec.isdigit() and (not pid or (pid.isdigit() and int(pid) == os.getpid())):
            watchdog = int(usec)
        if unset and env is None:
            for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                os.environ.pop(key, None)
        return cls(path, watchdog_usec=watchdog)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def watchdog_interval_s(self) -> float | None:
        """How often to send WATCHDOG=1: half of WatchdogSec=, as systemd recommends; None when off."""
        return self._watchdog_usec / 2_000_000 if self._watchdog_usec else None

    # -- messages ----------------------------------------------------------------------

    def send(self, *fields: str) -> bool:
        """Send `KEY=VALUE` fields in one datagram; True when the service manager got it."""
        if self._address is None:
            return False
        message = "\n".join(fields) + "\n"
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.settimeout(SEND_TIMEOUT_S)
                self._sock = sock
            self._sock.sendto(message.encode(), self._address)
        except OSError as exc:
            log.warning(
                "notify.send_failed", socket=self.socket_path, error=str(exc), fields=[f.split("=")[0] for f in fields]
            )
            self.close()
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *self._status(status))

    def status(self, text: str) -> bool:
        return self.send(*self._status(text))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def reloading(self, status: str | None = None) -> bool:
        """Reload started; send `ready()` when the new configuration is in force."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}", *self._status(status))

    def stopping(self, status: str | None = None) -> bool:
        return self.send("STOPPING=1", *self._status(status))

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for `seconds` more before the start/stop timeout fires (a rollback in flight)."""
        return self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @staticmethod
    def _status(text: str | None) -> tuple[str, ...]:
        if text is None:
            return ()
        return ("STATUS=" + " ".join(text.split())[:500],)
