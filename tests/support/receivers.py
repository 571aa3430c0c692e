"""Local receivers that answer as Slack, Discord, ntfy, Matrix, Gitea/Forgejo and a JSON webhook do.

One threaded `http.server` on 127.0.0.1 and an ephemeral port serves every
kind at its own paths and records what it got (method, path, headers, body),
so a test reads each message as the service would have shown it. What each
answers, as the services document it:

- Slack incoming webhook: POST /services/T/B/X -> 200 "ok" (api.slack.com/messaging/webhooks);
- Discord webhook: POST /api/webhooks/<id>/<token> -> 204 No Content (discord.com/developers/docs/resources/webhook);
- ntfy: POST / with a JSON {topic, title, message} -> 200 and the message as JSON
  (docs.ntfy.sh/publish/#publish-as-json);
- Matrix client-server API v3: GET /account/whoami, POST /join/{room}, PUT /rooms/{id}/send/m.room.message/{txn}
  (spec.matrix.org/v1.11/client-server-api), each with `Authorization: Bearer <token>`;
- Gitea/Forgejo: POST /api/v1/repos/{owner}/{repo}/issues/{index}/comments {"body"} with
  `Authorization: token <token>` -> 201 and the comment;
- generic JSON webhook: POST /hook/... -> 200.

`Blackhole` accepts connections and never answers: a receiver that hangs.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

MATRIX = "/_matrix/client/v3"
MATRIX_ROOM = "!lanesroom:localhost"


@dataclass
class Got:
    """One request a receiver got."""

    kind: str
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        """The message as a person would read it: title and body, whatever the service's payload shape."""
        if self.kind == "matrix":
            return str(self.json().get("body", ""))
        if self.kind in ("ntfy",):
            data = self.json()
            return f"{data.get('title', '')}\n{data.get('message', '')}"
        if self.kind == "slack":
            data = self.json()
            parts = [data.get("text", "")]
            for block in data.get("attachments") or []:
                parts += [str(block.get("title", "")), str(block.get("text", ""))]
            return "\n".join(str(p) for p in parts)
        if self.kind == "discord":
            data = self.json()
            parts = [data.get("content", "")]
            for embed in data.get("embeds") or []:
                parts += [str(embed.get("title", "")), str(embed.get("description", ""))]
            return "\n".join(str(p) for p in parts)
        if self.kind == "gitea":
            return str(self.json().get("body", ""))
        data = self.json()
        return f"{data.get('title', '')}\n{data.get('message', '')}"


class Receivers:
    """Every kind of receiver on one local port; `token` is what Matrix and Gitea demand as credentials."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.got: list[Got] = []
        self.failing: dict[str, int] = {}
        """Per kind: answer this many requests with 503 first (a receiver that is briefly down)."""
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                path = unquote(urlsplit(self.path).path)
                kind = outer.kind_of(self.command, path)
                status, reply = outer.answer(kind, self.command, path, headers, body)
                if status < 300 and kind not in ("whoami", "join"):
                    with lock:
                        outer.got.append(Got(kind, self.command, self.path, headers, body, time.monotonic()))
                data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(reply, bytes) else "application/json")
                self.send_header("Content-Length", str(len(data) if status != 204 else 0))
                self.end_headers()
                if status != 204:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = _serve  # noqa: N815

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    @staticmethod
    def kind_of(method: str, path: str) -> str:
        if path.startswith("/services/"):
            return "slack"
        if path.startswith("/api/webhooks/"):
            return "discord"
        if path.startswith(MATRIX + "/account/whoami"):
            return "whoami"
        if path.startswith(MATRIX + "/join/"):
            return "join"
        if path.startswith(MATRIX + "/rooms/") and method == "PUT":
            return "matrix"
        if path.startswith("/api/v1/repos/") and path.endswith("/comments"):
            return "gitea"
        if path.startswith("/hook"):
            return "json"
        if path == "/" and method == "POST":
            return "ntfy"
        return "unknown"

    def answer(
        self, kind: str, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes | dict[str, Any]]:
        if self.failing.get(kind, 0) > 0:
            self.failing[kind] -= 1
            return 503, b"busy"
        auth = headers.get("authorization", "")
        if kind in ("whoami", "join", "matrix") and auth != f"Bearer {self.token}":
            return 401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Invalid access token passed."}
        if kind == "gitea" and auth != f"token {self.token}":
            return 401, {"message": "token is required"}
        if kind == "slack":
            return 200, b"ok"
        if kind == "discord":
            return 204, b""
        if kind == "whoami":
            return 200, {"user_id": "@lanes:localhost", "device_id": "LANES"}
        if kind == "join":
            return 200, {"room_id": MATRIX_ROOM}
        if kind == "matrix":
            return 200, {"event_id": f"$event{len(self.got)}"}
        if kind == "gitea":
            return 201, {"id": len(self.got) + 1, "body": json.loads(body).get("body", "")}
        if kind == "ntfy":
            data = json.loads(body)
            return 200, {"id": f"m{len(self.got)}", "time": int(time.time()), "event": "message", **data}
        if kind == "json":
            return 200, {"ok": True}
        return 404, {"error": "not found"}

    def of(self, kind: str) -> list[Got]:
        return [g for g in list(self.got) if g.kind == kind]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class Blackhole:
    """A receiver that accepts connections and reads, but never answers (it hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.conns.append(conn)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for conn in self.conns:
            conn.close()
        self.sock.close()
