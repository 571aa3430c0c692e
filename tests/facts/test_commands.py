"""The command builders: exact argv shapes, markers, and scripts a 3.8 python can run."""

from __future__ import annotations

import ast
import shlex

import pytest

from reconciler.facts import commands as c

pytestmark = pytest.mark.timeout(60)


def test_probe_argv() -> None:
    argv = c.probe_argv(["/m/a", "/m/b c"], "/var/lib/lanes/lease.json", "/srv/models")
    assert argv[:3] == ["python3", "-I", "-c"]
    assert argv[3] == c.PROBE_SCRIPT
    assert argv[4:] == [
        "lanes-probe",
        "--lease-file",
        "/var/lib/lanes/lease.json",
        "--disk-path",
        "/srv/models",
        "--",
        "/m/a",
        "/m/b c",
    ]
    assert c.command_marker(argv) == c.PROBE_MARKER
    request = c.read_probe_argv(argv)
    assert request == c.ProbeRequest(("/m/a", "/m/b c"), "/var/lib/lanes/lease.json", "/srv/models")
    # What the transport sends survives the remote shell's word splitting.
    assert shlex.split(shlex.join(argv)) == argv


def test_lease_argv() -> None:
    argv = c.lease_argv("acquire", "/var/lib/lanes/lease.json", "lanes@control1", 300)
    assert argv == [
        "python3",
        "-I",
        "-c",
        c.LEASE_SCRIPT,
        "lanes-lease",
        "acquire",
        "/var/lib/lanes/lease.json",
        "lanes@control1",
        "300",
    ]
    assert c.command_marker(argv) == c.LEASE_MARKER
    assert c.read_lease_argv(argv) == c.LeaseRequest("acquire", "/var/lib/lanes/lease.json", "lanes@control1", 300)


def test_envfile_and_dropcaches_argv() -> None:
    env = c.envfile_argv("/etc/lanes/env/lane1.env")
    assert env == ["python3", "-I", "-c", c.ENVFILE_SCRIPT, "lanes-envfile", "write", "/etc/lanes/env/lane1.env"]
    remove = c.envfile_remove_argv(["/etc/lanes/env/lane1.env"])
    assert remove == ["python3", "-I", "-c", c.ENVFILE_SCRIPT, "lanes-envfile", "remove", "/etc/lanes/env/lane1.env"]
    assert c.command_marker(remove) == c.ENVFILE_MARKER
    assert c.command_marker(env) == c.ENVFILE_MARKER
    drop = c.dropcaches_argv()
    assert drop == ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches", "lanes-dropcaches"]
    assert c.command_marker(drop) == c.DROPCACHES_MARKER


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["docker", "ps", "-a"],
        ["sh", "-c", "echo hi", "something"],
        ["sh", "-c"],
        ["bash", "-c", "x", "lanes-probe"],
        ["docker", "run", "-c", "x", "lanes-probe"],
    ],
)
def test_marker_of_other_commands(argv: list[str]) -> None:
    assert c.command_marker(argv) is None


def test_read_back_rejects_other_commands() -> None:
    with pytest.raises(ValueError, match="not a probe"):
        c.read_probe_argv(c.dropcaches_argv())
    with pytest.raises(ValueError, match="malformed"):
        c.read_probe_argv(["python3", "-I", "-c", "x", "lanes-probe", "--disk-path", "/"])
    with pytest.raises(ValueError, match="malformed"):
        c.read_lease_argv(["python3", "-I", "-c", "x", "lanes-lease", "steal", "f", "o", "1"])


@pytest.mark.parametrize(
    "script", [c.PROBE_SCRIPT, c.LEASE_SCRIPT, c.ENVFILE_SCRIPT], ids=["probe", "lease", "envfile"]
)
def test_scripts_parse_as_python_3_8(script: str) -> None:
    # Sparks run the distribution's python3; nothing newer than 3.8 is assumed.
    ast.parse(script, feature_version=(3, 8))
