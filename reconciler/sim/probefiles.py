"""The installed probe program on a simulated Spark: a real file, checked by its hash like the launcher does.

`facts/probe_program.py` installs the probe program once per host under its hash and runs it through a
launcher that refuses a copy whose bytes do not match. A simulated host keeps that copy as a real file
under its own folder (`<work_dir>/fs/<path on the host>`), written from the bytes that arrived on stdin,
so a test can delete or corrupt it and see the control node notice and send it again in the same cycle.
The launcher's semantics are reproduced here exactly: `install` checks the hash of what arrived before
writing it (0600, renamed into place, older versions removed), `run` and `serve` read the file and check its
hash before anything is answered, with the launcher's exit status and message (a session's copy is checked
once, when it opens, as the launcher does before the program starts serving). The facts themselves are the
simulated host's (`hostfacts`): the program reads a machine's /proc and docker, which a simulated host
only has in memory. What the program really does on a host is tested by running it (`tests/facts`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from reconciler.facts.commands import ProbeRequest
from reconciler.facts.probe_program import NOT_INSTALLED_MESSAGE, PROBE_NOT_INSTALLED, PROGRAM_MAX_BYTES

Refusal = tuple[int, str]
"""(exit status, stderr) of a launcher that refused to run."""


class SimProbeFiles:
    """Where one simulated host keeps its installed probe program."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, host_path: str) -> Path:
        """The real file standing for `host_path` on this host."""
        return self.root / host_path.lstrip("/")

    def install(self, request: ProbeRequest, stdin: str) -> Refusal | None:
        assert request.program_path is not None
        assert request.program_hash is not None
        data = stdin.encode("utf-8")
        if len(data) > PROGRAM_MAX_BYTES or hashlib.sha256(data).hexdigest() != request.program_hash:
            return 2, "lanes-probe: the program received does not match its hash\n"
        target = self.path(request.program_path)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.replace(target)
        for old in target.parent.glob("probe-*.py"):
            if old.name != target.name:
                old.unlink(missing_ok=True)
        return None

    def check(self, program_path: str, program_hash: str) -> Refusal | None:
        """None when the installed copy is there and matches its hash; else the launcher's refusal (`run`, and
        `serve` before a session answers anything)."""
        try:
            with self.path(program_path).open("rb") as f:
                data = f.read(PROGRAM_MAX_BYTES + 1)
        except OSError as exc:
            return PROBE_NOT_INSTALLED, f"{NOT_INSTALLED_MESSAGE}: {exc.strerror}\n"
        if hashlib.sha256(data).hexdigest() != program_hash:
            return PROBE_NOT_INSTALLED, f"{NOT_INSTALLED_MESSAGE}: {program_path} does not match its hash\n"
        return None
