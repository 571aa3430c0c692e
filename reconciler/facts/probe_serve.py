"""The probe's long-lived session: one request line in, one answer line out, on one SSH channel per host.

Each cycle used to open an SSH channel per host, exec the launcher, read the answer and close the channel:
some 10 packets received and 3.5 sent per host, each decrypted or encrypted and dispatched in Python, which
was most of a no-op resync's CPU at 1,000 hosts (bench/README.md, issue 27). Instead each host keeps one
channel running the installed program in `serve` mode (`probe_program`: the launcher checks the installed
copy's hash exactly as for `run` and executes it), and a probe is one request line written to its stdin and
one answer line read from its stdout: a data packet each way.

The request is a compact JSON object (`request_line`); the answer is what a one-shot `run` prints, on one
line. The host's program keeps its own copy of `read_request_line`'s rules (it cannot import lanes;
`tests/facts` runs it against the lines built here). Every byte from a host is hostile, so both sides are
bounded (`probe_bounds`) and any breach ends the session: the program exits, the control node closes the
channel and reads the host as unreachable for that probe; the next probe opens a fresh session.

Pure: no I/O here (the transports carry the lines, `observe/probe.py` drives them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from reconciler.facts.commands import ProbeRequest
from reconciler.facts.probe_bounds import (
    ANSWER_MAX_BYTES,
    IDLE_EXIT_S,
    REQUEST_KEYS,
    REQUEST_MAX_BYTES,
    SERVE_MODE,
    SESSION_MAX_IDLE_S,
)

__all__ = [
    "ANSWER_MAX_BYTES",
    "IDLE_EXIT_S",
    "REQUEST_KEYS",
    "REQUEST_MAX_BYTES",
    "SERVE_MODE",
    "SESSION_MAX_IDLE_S",
    "read_request_line",
    "request_line",
]


def request_line(known: str | None, model_paths: Sequence[str], lease_file: str, disk_path: str) -> str:
    """One probe request: compact, key-sorted JSON and a newline (JSON escapes every newline inside)."""
    request = {"disk_path": disk_path, "known": known, "lease_file": lease_file, "model_paths": list(model_paths)}
    return json.dumps(request, sort_keys=True, separators=(",", ":")) + "\n"


def read_request_line(line: str) -> ProbeRequest:
    """Inverse of `request_line`, with the program's rules: ValueError for anything else (the simulator
    refuses such a request as the program does)."""
    if len(line.encode("utf-8")) > REQUEST_MAX_BYTES + 1:
        raise ValueError(f"request over {REQUEST_MAX_BYTES} bytes")
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or sorted(data) != list(REQUEST_KEYS):
        raise ValueError(f"not an object of exactly the keys {', '.join(REQUEST_KEYS)}")
    known, lease, disk, paths = data["known"], data["lease_file"], data["disk_path"], data["model_paths"]
    if known is not None and not isinstance(known, str):
        raise ValueError("known is neither a string nor null")
    if not isinstance(lease, str) or not isinstance(disk, str):
        raise ValueError("lease_file and disk_path must be strings")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ValueError("model_paths must be a list of strings")
    return ProbeRequest(model_paths=tuple(paths), lease_file=lease, disk_path=disk, known=known, mode="serve")
