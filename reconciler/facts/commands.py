"""Every non-docker command the reconciler sends to a host, as argv lists.

The reconciler talks to a Spark only through these lists and through the
`docker ...` lists built in `facts/docker.py`; the transport quotes them
with `shlex.join`, so no lane field is ever pasted into a shell string.
The few `sh -c` programs here are constants: variable parts travel as
positional parameters (`"$1"`), never inside the script text.

Each command carries a marker word right after its script (it becomes
`$0` / `sys.argv[1]` on the host and shows up in `ps`), which lets the
simulated Sparks recognise a command without interpreting shell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast

from reconciler.facts.envfile_script import ENVFILE_REFUSED_EXIT, ENVFILE_SCRIPT
from reconciler.facts.gpu_script import GPU_FREE_SCRIPT
from reconciler.facts.lease_script import LEASE_SCRIPT
from reconciler.facts.probe_program import LAUNCHER_SCRIPT, PROBE_PROGRAM_SHA256
from reconciler.facts.probe_script import PROBE_SCRIPT

__all__ = [
    "DROPCACHES_MARKER",
    "ENVFILE_MARKER",
    "ENVFILE_REFUSED_EXIT",
    "ENVFILE_SCRIPT",
    "GPUFREE_MARKER",
    "LAUNCHER_SCRIPT",
    "LEASE_MARKER",
    "LEASE_SCRIPT",
    "MARKERS",
    "PROBE_MARKER",
    "PROBE_SCRIPT",
    "EnvFileRequest",
    "LeaseRequest",
    "ProbeRequest",
    "command_marker",
    "dropcaches_argv",
    "envfile_argv",
    "envfile_remove_argv",
    "gpufree_argv",
    "installed_probe_argv",
    "lease_argv",
    "probe_argv",
    "probe_session_argv",
    "read_envfile_argv",
    "read_lease_argv",
    "read_probe_argv",
    "read_probe_session_argv",
]

PROBE_MARKER = "lanes-probe"
LEASE_MARKER = "lanes-lease"
ENVFILE_MARKER = "lanes-envfile"
DROPCACHES_MARKER = "lanes-dropcaches"
GPUFREE_MARKER = "lanes-gpufree"
MARKERS = frozenset({PROBE_MARKER, LEASE_MARKER, ENVFILE_MARKER, DROPCACHES_MARKER, GPUFREE_MARKER})

DROPCACHES_SCRIPT = "sync && echo 3 > /proc/sys/vm/drop_caches"

# -I: isolated mode, so a host's PYTHONPATH or a stray file in the login
# directory cannot change what the script imports.
_PYTHON = ("python3", "-I", "-c")


def probe_argv(model_paths: Sequence[str], lease_file: str, disk_path: str) -> list[str]:
    """The one-round-trip fact gathering command (prints one JSON object)."""
    return [
        *_PYTHON,
        PROBE_SCRIPT,
        PROBE_MARKER,
        "--lease-file",
        lease_file,
        "--disk-path",
        disk_path,
        "--",
        *model_paths,
    ]


def installed_probe_argv(
    mode: Literal["run", "install"],
    path: str,
    known: str | None,
    model_paths: Sequence[str],
    lease_file: str,
    disk_path: str,
) -> list[str]:
    """The probe through its installed copy (`facts/probe_program.py`): `run` it, or `install` it from stdin
    and run it. `known`: the digest of the facts the caller holds; an unchanged host answers with it alone."""
    return [
        *_PYTHON,
        LAUNCHER_SCRIPT,
        PROBE_MARKER,
        mode,
        path,
        PROBE_PROGRAM_SHA256,
        *(["--known", known] if known is not None else []),
        "--lease-file",
        lease_file,
        "--disk-path",
        disk_path,
        "--",
        *model_paths,
    ]


def probe_session_argv(path: str) -> list[str]:
    """The probe's long-lived session (`facts/probe_serve.py`): the launcher checks the installed copy at `path`
    against the program's hash, as for `run`, and executes it in `serve` mode, which answers one request line at
    a time on stdin. No facts' arguments here: each request carries its own."""
    return [*_PYTHON, LAUNCHER_SCRIPT, PROBE_MARKER, "serve", path, PROBE_PROGRAM_SHA256]


def lease_argv(action: Literal["acquire", "release"], lease_file: str, owner: str, ttl_s: int) -> list[str]:
    """Take, renew or give back the host lease (exit 3 when someone else holds it)."""
    return [*_PYTHON, LEASE_SCRIPT, LEASE_MARKER, action, lease_file, owner, str(ttl_s)]


def envfile_argv(path: str) -> list[str]:
    """Write stdin to `path`: a new 0600 file renamed into place, no symlink followed (`facts/envfile_script.py`)."""
    return [*_PYTHON, ENVFILE_SCRIPT, ENVFILE_MARKER, "write", path]


def envfile_remove_argv(paths: Sequence[str]) -> list[str]:
    """Remove env files (a missing one is fine; a symlink goes, its target stays)."""
    return [*_PYTHON, ENVFILE_SCRIPT, ENVFILE_MARKER, "remove", *paths]


def dropcaches_argv() -> list[str]:
    """Drop the page cache: on GB10 it counts as used memory until dropped."""
    return ["sh", "-c", DROPCACHES_SCRIPT, DROPCACHES_MARKER]


def gpufree_argv(timeout_s: float) -> list[str]:
    """Wait until no process outside a running lanes container holds the GPU (`facts/gpu_script.py`)."""
    return [*_PYTHON, GPU_FREE_SCRIPT, GPUFREE_MARKER, f"{timeout_s:g}"]


def command_marker(argv: Sequence[str]) -> str | None:
    """Which of our commands `argv` is, or None for anything else.

    The marker is the positional right after the `-c` script, for both the
    python3 and the sh forms.
    """
    try:
        script_at = list(argv).index("-c") + 1
    except ValueError:
        return None
    if not argv or argv[0] not in ("python3", "sh"):
        return None
    marker_at = script_at + 1
    if marker_at >= len(argv):
        return None
    marker = argv[marker_at]
    return marker if marker in MARKERS else None


@dataclass(frozen=True)
class ProbeRequest:
    """The arguments of a probe command, read back (the simulator answers them)."""

    model_paths: tuple[str, ...]
    lease_file: str
    disk_path: str
    known: str | None = None
    mode: Literal["inline", "run", "install", "serve"] = "inline"
    """inline: the program on the command line; run/install: through its installed copy at `program_path`;
    serve: one request line of a session (`facts/probe_serve.py`), whose argv `read_probe_session_argv` reads."""
    program_path: str | None = None
    program_hash: str | None = None


@dataclass(frozen=True)
class LeaseRequest:
    """The arguments of a lease command, read back."""

    action: Literal["acquire", "release"]
    lease_file: str
    owner: str
    ttl_s: int


@dataclass(frozen=True)
class EnvFileRequest:
    """The arguments of an env-file command, read back."""

    action: Literal["write", "remove"]
    paths: tuple[str, ...]


def read_envfile_argv(argv: Sequence[str]) -> EnvFileRequest:
    """Inverse of `envfile_argv` and `envfile_remove_argv`; ValueError when `argv` is neither."""
    if command_marker(argv) != ENVFILE_MARKER:
        raise ValueError("not an env-file command")
    rest = list(argv[5:])
    if len(rest) == 2 and rest[0] == "write":
        return EnvFileRequest("write", (rest[1],))
    if rest and rest[0] == "remove":
        return EnvFileRequest("remove", tuple(rest[1:]))
    raise ValueError(f"malformed env-file arguments: {rest!r}")


def read_probe_argv(argv: Sequence[str]) -> ProbeRequest:
    """Inverse of `probe_argv` and `installed_probe_argv`; ValueError when `argv` is neither."""
    if command_marker(argv) != PROBE_MARKER:
        raise ValueError("not a probe command")
    rest = list(argv[5:])
    mode: Literal["inline", "run", "install"] = "inline"
    path = digest = None
    if argv[3] == LAUNCHER_SCRIPT:
        if len(rest) < 3 or rest[0] not in ("run", "install"):
            raise ValueError(f"malformed probe launcher arguments: {rest[:3]!r}")
        mode = cast(Literal["run", "install"], rest[0])
        path, digest, rest = rest[1], rest[2], rest[3:]
    known = None
    if rest[:1] == ["--known"] and len(rest) >= 2:
        known, rest = rest[1], rest[2:]
    if len(rest) < 5 or rest[0] != "--lease-file" or rest[2] != "--disk-path" or rest[4] != "--":
        raise ValueError(f"malformed probe arguments: {rest[:5]!r}")
    return ProbeRequest(
        model_paths=tuple(rest[5:]),
        lease_file=rest[1],
        disk_path=rest[3],
        known=known,
        mode=mode,
        program_path=path,
        program_hash=digest,
    )


def read_probe_session_argv(argv: Sequence[str]) -> tuple[str, str]:
    """Inverse of `probe_session_argv`: (the installed copy's path, the hash it must have); ValueError when
    `argv` is not a probe session's command."""
    if command_marker(argv) != PROBE_MARKER or argv[3] != LAUNCHER_SCRIPT or list(argv[5:6]) != ["serve"]:
        raise ValueError("not a probe session")
    rest = list(argv[6:])
    if len(rest) != 2:
        raise ValueError(f"malformed probe session arguments: {rest[:3]!r}")
    return rest[0], rest[1]


def read_lease_argv(argv: Sequence[str]) -> LeaseRequest:
    """Inverse of `lease_argv`; ValueError when `argv` is not one."""
    if command_marker(argv) != LEASE_MARKER:
        raise ValueError("not a lease command")
    rest = list(argv[5:])
    if len(rest) != 4 or rest[0] not in ("acquire", "release"):
        raise ValueError(f"malformed lease arguments: {rest!r}")
    action = cast(Literal["acquire", "release"], rest[0])
    return LeaseRequest(action=action, lease_file=rest[1], owner=rest[2], ttl_s=int(rest[3]))
