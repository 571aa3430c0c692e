"""`lanes status --daemon URL` when the daemon is not there or is not a lanes daemon, and its wording.

The daemon's real answers (a full journal disk, an unreachable git remote) are
checked against a running daemon in tests/faults/test_control_faults.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.daemonview import DaemonView, trouble_lines
from reconciler.cli.main import app
from tests.support.net import free_port

pytestmark = pytest.mark.timeout(30)


class _NotADaemon(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>a dashboard</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_a_daemon() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotADaemon)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _status(tmp_path: Path, url: str, *extra: str) -> tuple[int, str]:
    args = ["status", "--daemon", url, "--db", str(tmp_path / "lanes.db"), "--repo", str(tmp_path), *extra]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    return result.exit_code, result.stdout


def test_a_daemon_that_does_not_answer_exits_1_and_still_shows_the_local_journal(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out = _status(tmp_path, url, "--json")
    assert code == 1, out
    data = json.loads(out)
    assert data["daemon"]["reachable"] is False and data["daemon"]["url"] == url
    assert "not answering" in data["daemon"]["error"] and data["lanes"] == []
    code, out = _status(tmp_path, url)
    assert code == 1 and f"daemon at {url}: not answering" in out


def test_a_server_that_is_not_a_lanes_daemon_is_said_so(tmp_path: Path, not_a_daemon: str) -> None:
    code, out = _status(tmp_path, not_a_daemon.removeprefix("http://"), "--json")  # scheme is optional
    assert code == 1, out
    assert json.loads(out)["daemon"] == {
        "url": not_a_daemon,
        "reachable": False,
        "error": "/status did not answer a lanes daemon's JSON",
    }


def test_every_obstacle_gets_a_line_and_a_clear_daemon_only_its_phase() -> None:
    now = 1_000_000.0
    calm = DaemonView("http://d:9464", {"phase": "idle", "head": "a" * 40, "lanes": []}, None)
    assert trouble_lines(calm, now) == [("green", "daemon at http://d:9464: idle, at aaaaaaaaaaaa")]
    stuck = DaemonView(
        "http://d:9464",
        {
            "phase": "waiting for the journal",
            "head": None,
            "store": {
                "path": "/var/lib/lanes/lanes.db",
                "writable": False,
                "problem": "disk I/O error",
                "since": now - 42,
                "held_writes": 3,
            },
            "source": {
                "url": "ssh://forge/state.git",
                "ok": False,
                "error": "timed out",
                "failures": 1,
                "failing_since": now - 90,
            },
            "blocked": {"zeta": "lease on dgx2 held by daemon-b", "alpha": "dgx5 unreachable"},
            "lanes": [],
        },
        None,
    )
    lines = trouble_lines(stuck, now)
    assert [c for c, _ in lines] == ["green", "red", "yellow", "yellow", "yellow"]
    assert lines[0][1] == "daemon at http://d:9464: waiting for the journal, at no commit yet"
    assert lines[1][1].startswith("journal /var/lib/lanes/lanes.db not writable for 42 s (disk I/O error); 3 record(s)")
    assert lines[2][1].startswith("fetch of ssh://forge/state.git failing for 90 s (1 attempt): timed out")
    assert [t for _, t in lines[3:]] == [
        "alpha blocked: dgx5 unreachable",
        "zeta blocked: lease on dgx2 held by daemon-b",
    ]
