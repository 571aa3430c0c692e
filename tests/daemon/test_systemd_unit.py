"""The systemd unit: `systemd-analyze verify` passes and `security --offline` rates it 2.0 or lower.

These run the real systemd-analyze on the unit file; systemd does not have to be PID 1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.daemon.config import DEFAULT_CONFIG, SYSTEMD_ENV

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "systemd" / "lanes-reconciler.service"
INSTALLED_LANES = "/opt/lanes/bin/lanes"
"""Where scripts/install puts the entry point (its default --prefix, /opt/lanes)."""
EXEC_START = f"ExecStart={INSTALLED_LANES} daemon --config {DEFAULT_CONFIG}"
MAX_EXPOSURE = 2.0

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (apt install systemd)")
ENV = {**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "", "SYSTEMD_LOG_COLOR": "0"}


def analyze(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run([ANALYZE, *map(str, args)], capture_output=True, text=True, env=ENV, timeout=60, check=False)


def settings(text: str) -> dict[str, list[str]]:
    """Key -> every value it is given (systemd keys may repeat), comments and sections ignored."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def lanes_binary(tmp_path: Path) -> Path:
    """The `lanes` this test suite runs from; a stand-in script when the venv has no entry point."""
    venv_lanes = Path(sys.executable).parent / "lanes"
    if venv_lanes.is_file() and os.access(venv_lanes, os.X_OK):
        return venv_lanes
    stub = tmp_path / "bin" / "lanes"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return stub


def test_the_unit_says_what_the_daemon_relies_on() -> None:
    s = settings(UNIT.read_text())
    assert f"ExecStart={s['ExecStart'][0]}" == EXEC_START
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["Restart"] == ["on-failure"] and s["KillMode"] == ["mixed"]
    assert s["TimeoutStopSec"] == ["90s"] and s["WatchdogSec"] == ["60s"]
    assert s["User"] == ["lanes"] and s["Group"] == ["lanes"] and "DynamicUser" not in s
    assert s["StateDirectory"] == ["lanes"] and s["ConfigurationDirectory"] == ["lanes"]
    credentials = dict(v.split(":", 1) for v in s["LoadCredential"])
    assert credentials["ssh-key"] == "/etc/lanes/credentials/ssh-key"
    assert {"github-token", "webhook-secret"} <= set(credentials)
    for name in ("github-token", "webhook-secret"):
        assert not credentials[name].startswith("/"), f"{name}: optional, so looked up in the credstore, not pathed"
    # Lane secrets come from their own folder, as lane_<file>: apart from the daemon's credentials (issue 14).
    assert credentials["lane"] == "/etc/lanes/lane-secrets" and "hf-token" not in credentials
    # The config defaults point at what this unit provides.
    assert {
        "STATE_DIRECTORY": "/var/lib/" + s["StateDirectory"][0],
        "CONFIGURATION_DIRECTORY": "/etc/" + s["ConfigurationDirectory"][0],
        "CREDENTIALS_DIRECTORY": "/run/credentials/" + UNIT.name,
    } == SYSTEMD_ENV


def test_the_unit_bounds_descriptors_memory_and_tasks() -> None:
    """A 1,000-host SSH pool alone keeps ~1,000 sockets open: the default soft limit (1,024) would not do."""
    s = settings(UNIT.read_text())
    assert int(s["LimitNOFILE"][0]) >= 1000 + 4096 + 1024  # the pool, the HTTP cap's maximum, the rest
    memory = s["MemoryMax"][0]
    assert memory.endswith("G") and 0.5 <= float(memory[:-1]) <= 4, memory  # ~6x the measured peak (163 MB)
    assert 64 <= int(s["TasksMax"][0]) <= 4096


@needs_analyze
def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    """verify checks that ExecStart= is executable, so a copy points it at this venv's `lanes`; nothing else changes."""
    text = UNIT.read_text()
    assert text.count(EXEC_START) == 1
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(EXEC_START, EXEC_START.replace(INSTALLED_LANES, str(lanes_binary(tmp_path)))))
    result = analyze("verify", "--recursive-errors=yes", "--man=no", copy)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


@needs_analyze
def test_verify_of_the_file_as_installed_complains_only_about_the_missing_binary() -> None:
    if Path(INSTALLED_LANES).exists():
        pytest.skip(f"{INSTALLED_LANES} exists here; the previous test covers verify")
    result = analyze("verify", "--recursive-errors=yes", "--man=no", UNIT)
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert problems == [f"{UNIT.name}: Command {INSTALLED_LANES} is not executable: No such file or directory"]


@needs_analyze
def test_verify_would_catch_a_mistake(tmp_path: Path) -> None:
    """The flags above make warnings fatal on this systemd, so a typo in the unit would fail the test."""
    copy = tmp_path / UNIT.name
    text = UNIT.read_text().replace(EXEC_START, EXEC_START.replace(INSTALLED_LANES, str(lanes_binary(tmp_path))))
    copy.write_text(text.replace("ProtectHome=true", "ProtectHome=ture"))
    result = analyze("verify", "--recursive-errors=yes", "--man=no", copy)
    assert result.returncode != 0 and "ture" in result.stderr


@needs_analyze
def test_security_exposure_is_at_most_two() -> None:
    result = analyze("security", "--offline=true", f"--threshold={int(MAX_EXPOSURE * 10)}", "--no-pager", UNIT)
    out = result.stdout + result.stderr
    match = re.search(rf"Overall exposure level for {re.escape(UNIT.name)}: (\d+\.\d+) (\w+)", out)
    assert match, out
    score = float(match.group(1))
    print(f"\nsystemd-analyze security --offline=true {UNIT.name}: {score} {match.group(2)}")
    assert score <= MAX_EXPOSURE, out
    assert result.returncode == 0, out
    passed = {line.split()[1] for line in out.splitlines() if line.startswith("✓")}
    for check in (
        "User=/DynamicUser=",
        "NoNewPrivileges=",
        "CapabilityBoundingSet=~CAP_SYS_ADMIN",
        "MemoryDenyWriteExecute=",
        "ProtectSystem=",
        "ProtectHome=",
        "PrivateDevices=",
        "SystemCallFilter=~@privileged",
        "RestrictAddressFamilies=~AF_NETLINK",
        "NotifyAccess=",
    ):
        assert check in passed, f"{check} does not pass:\n{out}"
