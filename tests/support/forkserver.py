"""`python -m reconciler.cli.main ARGS` for tests, without paying the interpreter's import each time.

Importing the `lanes` program costs about 2 s of CPU (pydantic models, dataclasses, asyncssh, pygit2);
the fast tier starts it hundreds of times (every test daemon, every `lanes status` a test reads), which
was most of the CPU its two workers spent. A server process per test worker imports it once and forks a
child per run; the child becomes what `python -m reconciler.cli.main ARGS` would be: the caller's
stdin, stdout and stderr (passed as descriptors), environment and working directory, `runpy` running the
module as `__main__`, Python's own shutdown (threads joined, atexit handlers) and exit status. It is its
own process: the test signals it by its pid and reads its exit status (-N when a signal ended it).

What the import froze is the only difference, so a run whose environment differs from the server's in
anything but the names in `_FREE` (read at run time, not import time) is started as a real interpreter;
as is any run when the server cannot be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MODULE = "reconciler.cli.main"
_FREE = ("COLUMNS", "LINES", "PYTEST_CURRENT_TEST")
"""Read at run time (click and rich: a console made without COLUMNS reads it on every use), or by pytest
alone (the test now running, which changes with every test)."""
_FREE_PREFIX = "LANES_"


def _comparable(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in _FREE and not k.startswith(_FREE_PREFIX)}


# -- the server (a process of its own) ---------------------------------------------------------------


def _exit_code(code: object) -> int:
    """What the interpreter exits with for `SystemExit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _std_streams() -> None:
    """New sys.std* on descriptors 0-2, made as the interpreter makes them at start (PYTHONUNBUFFERED)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=encoding, errors=errors)
    made = []
    for fd, errs, line in ((1, errors, os.isatty(1)), (2, "backslashreplace", True)):
        raw = io.FileIO(fd, "w", closefd=False)
        wrapper = io.TextIOWrapper(io.BufferedWriter(raw), encoding=encoding, errors=errs, line_buffering=line)
        wrapper.reconfigure(write_through=unbuffered)
        made.append(wrapper)
    _KEEP.extend((sys.stdin, sys.stdout, sys.stderr))  # never collected: they must not close 0-2
    sys.stdin, sys.stdout, sys.stderr = stdin, made[0], made[1]
    for name, stream in (("__stdin__", stdin), ("__stdout__", made[0]), ("__stderr__", made[1])):
        setattr(sys, name, stream)  # what the interpreter started with, as code that restores them reads


_KEEP: list[Any] = []


def _child(request: dict[str, Any], fds: Sequence[int], keep_closed: Sequence[Any]) -> None:
    """In the forked child: become `python -m MODULE ARGS`, and never return."""
    import atexit
    import runpy
    import threading

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for thing in keep_closed:
            with contextlib.suppress(OSError):
                thing.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        _std_streams()
        sys.argv = ["-m", *request["args"]]
        try:
            runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except KeyboardInterrupt:
            traceback.print_exc()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # what the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own join of threads
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
    finally:
        os._exit(code)


def serve(path: str) -> None:
    """Import the program once, then fork a child per request on the SOCK_SEQPACKET socket at `path`.

    A request is one message (JSON: args, env, cwd) carrying stdin, stdout and stderr; the answer is the
    child's pid, then its exit status, on the same connection. The server ends when its parent does."""
    import reconciler.cli.main
    import reconciler.daemon.service  # what `lanes daemon` imports when it starts

    # Every command's modules, imported once here: a run imports those of the command it names (`run`).
    reconciler.cli.main.build()

    del sys.modules[MODULE]  # runpy runs it afresh as __main__, as `-m` does (and warns if it is there)
    parent = os.getppid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(128)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    waiting: dict[int, socket.socket] = {}
    while os.getppid() == parent:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is server:
                conn, _ = server.accept()
                try:
                    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                    request = json.loads(data)
                except (OSError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, [sel, server, conn, *waiting.values(), _Fd(wake_r), _Fd(wake_w)])
                for fd in fds:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    conn.send(str(pid).encode())
                waiting[pid] = conn
            else:
                with contextlib.suppress(OSError):
                    while os.read(wake_r, 512):
                        pass
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            ended = waiting.pop(pid, None)
            if ended is not None:
                with contextlib.suppress(OSError):
                    ended.send(str(os.waitstatus_to_exitcode(status)).encode())
                ended.close()


class _Fd:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


# -- the client (in the test worker) -------------------------------------------------------------------


class Forked:
    """A child of the fork server, as much of `asyncio.subprocess.Process` as the tests use."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._done = asyncio.get_running_loop().create_future()
        conn.setblocking(False)
        asyncio.get_running_loop().add_reader(conn.fileno(), self._on_status)

    def _on_status(self) -> None:
        try:
            data = self._conn.recv(64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        asyncio.get_running_loop().remove_reader(self._conn.fileno())
        self._conn.close()
        # The server went away before the child ended: the child is an orphan nobody reaps for us.
        self.returncode = int(data) if data else -signal.SIGKILL
        if not self._done.done():
            self._done.set_result(self.returncode)

    async def wait(self) -> int:
        return int(await asyncio.shield(self._done))

    def send_signal(self, sig: int) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Server:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.path = ""
        self.env: dict[str, str] = {}
        self.cwd = ""

    def ensure(self) -> bool:
        """The server of this process, started on first use; False if it cannot be had."""
        if self.proc is not None and self.proc.poll() is None:
            return True
        if os.environ.get("LANES_TEST_NO_FORKSERVER"):
            return False
        folder = tempfile.mkdtemp(prefix="lanes-fork-")
        self.path = str(Path(folder) / "s")
        self.env = {k: v for k, v in os.environ.items() if k not in _FREE}
        self.cwd = os.getcwd()
        self.proc = subprocess.Popen(  # this interpreter, this module
            [sys.executable, "-m", "tests.support.forkserver", self.path],
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                return False
            time.sleep(0.02)
        return True

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def fits(self, env: Mapping[str, str]) -> bool:
        return os.getcwd() == self.cwd and _comparable(env) == _comparable(self.env)


_server = _Server()


def stop_server() -> None:
    """The end of a test worker: its fork server goes with it (children it started are the tests')."""
    _server.stop()


async def spawn(args: Sequence[str], fds: Sequence[int], env: Mapping[str, str] | None = None) -> Forked | None:
    """`python -m reconciler.cli.main ARGS` on stdin/stdout/stderr `fds`, forked from the server; None when
    this run must be a real interpreter (an environment the server's import did not see, no server)."""
    env = dict(os.environ if env is None else env)
    if not _server.ensure() or not _server.fits(env):
        return None
    request = json.dumps({"args": list(args), "env": env, "cwd": os.getcwd()}).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.settimeout(30)
        conn.connect(_server.path)
        socket.send_fds(conn, [request], list(fds))
        pid = int(conn.recv(64))
    except (OSError, ValueError):
        conn.close()
        return None
    return Forked(pid, conn)


if __name__ == "__main__":
    serve(sys.argv[1])
