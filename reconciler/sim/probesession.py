"""A simulated Spark's probe session: the installed program's `serve` mode, as strict as the real one.

The real program (`facts/probe_script.py`, run by `tests/facts`) answers one request line at a time on stdin
after its launcher checked the installed copy's hash, and exits on end of stdin, on a request over
`REQUEST_MAX_BYTES` or one it cannot read (a message on stderr, exit 2). Here the same: the session's argv is
checked exactly as `facts.commands` builds it and the copy against its hash (`SimContainerRuntime.
open_probe_session`) before anything is read, then each line goes through the runtime's `execute` (so a
test's latency or watcher on the probe marker sees every request) and its answer is written back. Requests,
bytes in and bytes out are counted on the host. Not simulated: the program's idle exit (hours).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncssh

from reconciler.facts.probe_serve import REQUEST_MAX_BYTES

if TYPE_CHECKING:
    from reconciler.sim.sshd import SimHost

_CHUNK = 1 << 16


async def serve_probe_session(host: SimHost, process: asyncssh.SSHServerProcess[str], argv: list[str]) -> None:
    try:
        refused = host.runtime.open_probe_session(argv)
        if refused is not None:
            _end(host, process, *refused)
            return
        pending, size = "", 0
        while True:
            while "\n" not in pending:
                if size > REQUEST_MAX_BYTES:
                    _end(host, process, 2, f"lanes-probe: request over {REQUEST_MAX_BYTES} bytes\n")
                    return
                chunk = await process.stdin.read(_CHUNK)
                if not chunk:
                    process.exit(0)  # stdin ended: the client closed the session (or its connection went)
                    return
                pending += chunk
                size += len(chunk.encode())
            line, _, pending = pending.partition("\n")
            raw = len(line.encode()) + 1
            size -= raw
            host.bytes_in += raw
            host.requests += 1
            host.commands.append(argv)
            if raw - 1 > REQUEST_MAX_BYTES:
                _end(host, process, 2, f"lanes-probe: request over {REQUEST_MAX_BYTES} bytes\n")
                return
            answer = await host.until_gone(process, argv, line + "\n")
            if answer is None:
                return
            status, out, err = answer
            if status != 0:  # the program refused the request: it says why and exits
                _end(host, process, status, err)
                return
            host.bytes_out += len(out.encode())
            process.stdout.write(out)
    except (OSError, asyncssh.Error):
        pass  # the client went away (timeout, dropped connection) while the session ran


def _end(host: SimHost, process: asyncssh.SSHServerProcess[str], status: int, err: str) -> None:
    host.bytes_out += len(err.encode())
    process.stderr.write(err)
    process.exit(status)
