"""One process serving the engines of many simulated containers: `python -m reconciler.sim.sharedstandin`.

A simulated fleet of a thousand hosts runs a thousand ranks; one stand-in
process each (`standin`) is more processes than a small machine holds. Here
a single process keeps one `Engine` and one listening socket per container,
each bound to its host's own address and port, so `listening_ports()` (which
reads /proc/net/tcp per address) and the readiness gate see what they would
see with a process per container. Worker ranks get no socket, as with
`standin --worker`.

One thread waits on every listening socket and on the control pipe with a
selector, and hands each accepted connection to a thread of its own running
`standin_http.Handler`, so a streamed completion on one lane never holds up
another. Nothing polls: an idle process sleeps in `select`.

Control protocol, one JSON object per line. On stdin:
  {"seq": n, "op": "open", "id": ID, "bind": ADDR, "argv": [...], "env": {...}, "log": PATH, "worker": bool}
  {"seq": n, "op": "close", "id": ID, "code": 0 | 137}
Each is answered on stdout with {"seq": n, "ok": true}. A container that ends
on its own (cannot bind, STANDIN_CRASH_AFTER_S) is reported, before any later
reply, as {"event": "exited", "id": ID, "code": 1}. End of stdin (the
simulator closed it, or died) ends the process. Stdlib only.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, BinaryIO

from reconciler.sim.engineargs import Behaviour, engine_refusal, scan_engine_argv
from reconciler.sim.standin_http import Engine, StandinServer
from reconciler.sim.standin_ray import ray_head


class _Listener(StandinServer):
    """One container's HTTP face, driven by the shared selector instead of `serve_forever`."""

    # Closing must not wait for keep-alive connections to end on their own: they are cut (hang_up).
    block_on_close = False

    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        super().__init__(address, engine)
        self.socket.setblocking(False)  # a connection reset before accept() must not block the loop
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, client = self.socket.accept()
        conn.setblocking(True)  # the handler thread reads and writes in blocking mode
        with self._open_lock:
            self._open.add(conn)
        return conn, client

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def accept_one(self) -> None:
        try:
            request, client = self.get_request()
        except OSError:
            return  # the client went away between readiness and accept
        try:
            self.process_request(request, client)  # ThreadingMixIn: a thread per connection
        except Exception:
            self.shutdown_request(request)

    def hang_up(self) -> None:
        """Stop listening and cut every open connection, as the end of an engine process would."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # the handler thread sees EOF and closes it
        self.server_close()


class _Container:
    """What the shared process holds for one container: its engine's socket once bound."""

    def __init__(self, cid: str, log_path: Path) -> None:
        self.cid = cid
        self.log_path = log_path
        self.listener: _Listener | None = None

    def log(self, message: str) -> None:
        # The same lifecycle lines a stand-in process prints, so `docker logs` reads the same.
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        with suppress(OSError), self.log_path.open("a") as f:
            f.write(f"{stamp} standin[{os.getpid()}/{self.cid[:12]}]: {message}\n")


_Timer = tuple[float, int, _Container, Callable[[], None]]


class SharedStandin:
    """The selector loop: control lines in, replies and events out, connections handed to threads."""

    def __init__(self, control_in: int, control_out: BinaryIO) -> None:
        self._in = control_in
        self._out = control_out
        self._selector = selectors.DefaultSelector()
        self._live: dict[str, _Container] = {}
        self._timers: list[_Timer] = []
        self._order = itertools.count()  # ties in the timer heap never compare containers
        self._pending = b""

    def run(self) -> int:
        os.set_blocking(self._in, False)
        self._selector.register(self._in, selectors.EVENT_READ, None)
        try:
            while True:
                timeout = max(self._timers[0][0] - time.monotonic(), 0.0) if self._timers else None
                for key, _ in self._selector.select(timeout):
                    if key.data is None:
                        if not self._read_control():
                            return 0
                    else:
                        key.data.accept_one()
                self._fire_due()
        except BrokenPipeError:
            return 0  # the simulator stopped reading: nobody is left to serve
        finally:
            for container in list(self._live.values()):
                self._end(container)
            self._selector.close()

    # -- control -----------------------------------------------------------------

    def _read_control(self) -> bool:
        try:
            data = os.read(self._in, 1 << 16)
        except BlockingIOError:
            return True
        if not data:
            return False
        self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            if line.strip():
                self._handle(json.loads(line))
        return True

    def _handle(self, msg: dict[str, Any]) -> None:
        cid = str(msg["id"])
        if msg["op"] == "open":
            self._open(cid, msg)
        elif msg["op"] == "close":
            container = self._live.get(cid)
            if container is not None:
                container.log("SIGTERM: stopping" if msg.get("code", 0) == 0 else "killed")
                self._end(container)
        self._send({"seq": msg["seq"], "ok": True})

    def _send(self, obj: dict[str, Any]) -> None:
        self._out.write(json.dumps(obj).encode() + b"\n")
        self._out.flush()

    # -- containers ------------------------------------------------------------------

    def _open(self, cid: str, msg: dict[str, Any]) -> None:
        started = time.monotonic()
        container = _Container(cid, Path(msg["log"]))
        self._live[cid] = container
        behaviour = Behaviour.from_env({str(k): str(v) for k, v in dict(msg.get("env") or {}).items()})
        argv = [str(a) for a in msg.get("argv") or []]
        refused = engine_refusal(argv, behaviour.version, behaviour.parser)
        if refused is not None:
            # As the engine's argparse: usage and error on stderr, exit 2, on a worker rank too (standin.py).
            status, text = refused
            for line in text.splitlines():
                container.log(line)
            self._exited(container, status)
            return
        if ray_head(argv) is not None:
            # Its nodes' joins are played by per-container stand-ins only (standin_ray): rather than serve
            # with no cluster behind it, a Ray head here ends at once, never ready, and says why.
            container.log("a Ray lane's head needs its nodes to join, which the shared stand-in does not play")
            self._exited(container, 1)
            return
        args = scan_engine_argv(argv)
        if behaviour.crash_after_s is not None:
            self._at(started + behaviour.crash_after_s, container, lambda: self._crash(container, behaviour))
        if msg.get("worker"):
            container.log(f"worker rank of {args.served_name} started; no HTTP")
            return
        engine = Engine(args, behaviour, started, argv)  # the argv's flags set its decoding (speculation)
        bind = str(msg.get("bind") or args.host)
        if behaviour.port_delay_s > 0:
            self._at(started + behaviour.port_delay_s, container, lambda: self._listen(container, bind, engine))
        else:
            self._listen(container, bind, engine)

    def _listen(self, container: _Container, bind: str, engine: Engine) -> None:
        port = engine.args.port
        try:
            listener = _Listener((bind, port), engine)
        except OSError as exc:
            container.log(f"cannot listen on {bind}:{port}: {exc}")
            self._exited(container, 1)
            return
        container.listener = listener
        self._selector.register(listener.socket, selectors.EVENT_READ, listener)
        container.log(f"serving {engine.name} on {bind}:{port}; loading for {engine.behaviour.load_s:g} s")
        if not engine.behaviour.never_healthy:
            self._at(engine.loaded_at, container, lambda: container.log(f"model {engine.name} loaded; ready"))

    def _crash(self, container: _Container, behaviour: Behaviour) -> None:
        container.log(f"crashing after {behaviour.crash_after_s:g} s (STANDIN_CRASH_AFTER_S)")
        self._exited(container, 1)

    def _exited(self, container: _Container, code: int) -> None:
        self._end(container)
        self._send({"event": "exited", "id": container.cid, "code": code})

    def _end(self, container: _Container) -> None:
        if self._live.get(container.cid) is container:
            del self._live[container.cid]
        listener, container.listener = container.listener, None
        if listener is not None:
            self._selector.unregister(listener.socket)
            listener.hang_up()

    # -- timers ----------------------------------------------------------------------

    def _at(self, when: float, container: _Container, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (when, next(self._order), container, action))

    def _fire_due(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, container, action = heapq.heappop(self._timers)
            if self._live.get(container.cid) is container:  # timers of an ended container are dropped
                action()


def main() -> int:
    return SharedStandin(sys.stdin.fileno(), sys.stdout.buffer).run()


if __name__ == "__main__":
    sys.exit(main())
