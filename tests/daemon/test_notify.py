"""sd_notify against a real AF_UNIX datagram socket standing in for systemd."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.daemon.notify import Notifier


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[str, socket.socket]]:
    """A bound datagram socket playing the service manager: (NOTIFY_SOCKET value, socket)."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(2)
    yield str(path), sock
    sock.close()


def fields(sock: socket.socket) -> dict[str, str]:
    data = sock.recv(4096).decode()
    assert data.endswith("\n")
    return dict(line.split("=", 1) for line in data.splitlines())


def test_every_message_reaches_the_manager(manager: tuple[str, socket.socket]) -> None:
    path, sock = manager
    n = Notifier.from_env({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.status("fetching git@forge:team/state.git")
    assert fields(sock) == {"STATUS": "fetching git@forge:team/state.git"}
    assert n.ready("reconciling abc123")
    assert fields(sock) == {"READY": "1", "STATUS": "reconciling abc123"}
    assert n.watchdog()
    assert fields(sock) == {"WATCHDOG": "1"}
    assert n.stopping("rolling back lane x")
    assert fields(sock) == {"STOPPING": "1", "STATUS": "rolling back lane x"}
    assert n.extend_timeout(30)
    assert fields(sock) == {"EXTEND_TIMEOUT_USEC": "30000000"}
    n.close()


def test_reloading_carries_the_monotonic_clock_in_microseconds(manager: tuple[str, socket.socket]) -> None:
    path, sock = manager
    n = Notifier(path)
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert n.reloading("re-reading /etc/lanes/reconciler.toml")
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    got = fields(sock)
    assert got["RELOADING"] == "1" and got["STATUS"].startswith("re-reading")
    assert before <= int(got["MONOTONIC_USEC"]) <= after
    assert n.ready()
    assert fields(sock) == {"READY": "1"}
    n.close()


def test_status_text_is_one_line(manager: tuple[str, socket.socket]) -> None:
    path, sock = manager
    n = Notifier(path)
    n.status("first line\nsecond\tline  ")
    assert fields(sock) == {"STATUS": "first line second line"}
    n.close()


def test_abstract_namespace_sockets() -> None:
    name = f"lanes-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(2)
    try:
        n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        assert n.ready()
        assert fields(sock) == {"READY": "1"}
        n.close()
    finally:
        sock.close()


def test_without_notify_socket_everything_is_a_no_op() -> None:
    n = Notifier.from_env({})
    assert not n.enabled
    assert n.ready() is False and n.watchdog() is False and n.reloading() is False and n.stopping() is False
    assert n.watchdog_interval_s() is None


def test_a_vanished_manager_is_reported_not_raised(tmp_path: Path) -> None:
    n = Notifier(str(tmp_path / "gone"))
    assert n.enabled
    assert n.status("x") is False


def test_watchdog_interval_is_half_of_watchdog_usec_for_this_process_only() -> None:
    env = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "60000000"}
    assert Notifier.from_env(env).watchdog_interval_s() == 30.0
    mine = {**env, "WATCHDOG_PID": str(os.getpid())}
    assert Notifier.from_env(mine).watchdog_interval_s() == 30.0
    other = {**env, "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier.from_env(other).watchdog_interval_s() is None
    assert Notifier.from_env({**env, "WATCHDOG_USEC": "0"}).watchdog_interval_s() is None


def test_unset_removes_the_variables_from_the_environment(
    manager: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, sock = manager
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "20000000")
    n = Notifier.from_env(unset=True)
    assert "NOTIFY_SOCKET" not in os.environ and "WATCHDOG_USEC" not in os.environ
    assert n.watchdog_interval_s() == 10.0
    assert n.watchdog()
    assert fields(sock) == {"WATCHDOG": "1"}
    n.close()


def test_unsupported_socket_kinds_disable_notifications() -> None:
    assert not Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled
