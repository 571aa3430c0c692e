"""The probe program installed on each host once, named by its hash, and the short command that runs it.

Sending the whole probe program (`probe_script.PROBE_SCRIPT`, some 17 KB) on every host's command
line every cycle made a no-op resync cost the program's size times the fleet. Instead it is written
once into the host's state folder as `probe-<sha256>.py` and each cycle sends only the launcher below
(under 1.5 KB) with the path and the hash. The launcher reads the file, checks its sha256 against the
hash it was given and executes exactly the bytes it checked (no window between the check and the
run), so a missing, truncated or altered copy is never run: it exits `PROBE_NOT_INSTALLED` and the
control node sends the program on stdin with `install` in the same cycle, which checks the hash of
what arrived, writes it atomically (a new 0600 file renamed into place) and runs it. A new lanes
version has a new hash, hence a new name: it is installed at its first probe, and older copies in the
folder are removed then. The common cycle stays one SSH round trip; only a host seen for the first
time, or after the program changed, pays a second.

`serve` checks the installed copy exactly as `run` does and executes it in its session mode
(`probe_serve.py`): the program then answers one request line at a time on stdin, so a host's probes share
one channel instead of opening one each. The launcher refuses any other mode.

Stdlib only, Python 3.8 syntax, like every program a host runs (`facts/commands.py`).
"""

from __future__ import annotations

import hashlib

from reconciler.facts.probe_script import PROBE_SCRIPT

PROBE_NOT_INSTALLED = 97
"""The launcher's exit status when the installed program is missing or does not match its hash."""
NOT_INSTALLED_MESSAGE = "lanes-probe: not installed"
"""How its stderr begins then (the status alone could be the program's, were it ever to exit 97)."""
PROGRAM_MAX_BYTES = 1 << 20
"""Neither the launcher nor the installer reads more than this: the program is 17 KB."""

PROBE_PROGRAM_SHA256 = hashlib.sha256(PROBE_SCRIPT.encode("utf-8")).hexdigest()


def program_path(state_dir: str) -> str:
    """Where the current program lives on a host: its hash in its name."""
    return f"{state_dir.rstrip('/')}/probe-{PROBE_PROGRAM_SHA256}.py"


LAUNCHER_SCRIPT = r"""
import hashlib, os, sys
mode, path, want = sys.argv[2], sys.argv[3], sys.argv[4]
limit = @MAX@
if mode == "install":
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit or hashlib.sha256(data).hexdigest() != want:
        sys.stderr.write("lanes-probe: the program received does not match its hash\n")
        sys.exit(2)
    folder, name = os.path.split(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = os.path.join(folder, ".%s.%d.tmp" % (name, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for old in os.listdir(folder):
        if old.startswith("probe-") and old.endswith(".py") and old != name:
            try:
                os.unlink(os.path.join(folder, old))  # an older version's copy: never run again
            except OSError:
                pass
elif mode in ("run", "serve"):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        sys.stderr.write("@NOT_INSTALLED@: %s\n" % (e.strerror or e))
        sys.exit(@EXIT@)
    if hashlib.sha256(data).hexdigest() != want:
        sys.stderr.write("@NOT_INSTALLED@: %s does not match its hash\n" % path)
        sys.exit(@EXIT@)
else:
    sys.stderr.write("lanes-probe: unknown mode %r\n" % mode)
    sys.exit(2)
sys.argv = [path, sys.argv[1]] + (["--serve"] if mode == "serve" else sys.argv[5:])
exec(compile(data, path, "exec"), {"__name__": "__main__"})
"""
LAUNCHER_SCRIPT = (
    LAUNCHER_SCRIPT.replace("@MAX@", str(PROGRAM_MAX_BYTES))
    .replace("@NOT_INSTALLED@", NOT_INSTALLED_MESSAGE)
    .replace("@EXIT@", str(PROBE_NOT_INSTALLED))
)
