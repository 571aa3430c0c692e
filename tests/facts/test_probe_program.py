"""The installed probe program, run for real: installed from stdin under its hash, refused when its copy
is missing or altered, and answering with its digest alone when the facts are the ones the caller holds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from reconciler.facts.commands import PROBE_SCRIPT, installed_probe_argv
from reconciler.facts.parse import parse_probe_answer
from reconciler.facts.probe_digest import fact_digest
from reconciler.facts.probe_program import PROBE_NOT_INSTALLED, PROBE_PROGRAM_SHA256, program_path
from tests.facts.probeprocs import run_probe as _run

pytestmark = pytest.mark.timeout(60)


def _argv(tmp_path: Path, mode: str, known: str | None = None) -> list[str]:
    state = tmp_path / "state"
    args = ([str(tmp_path / "models" / "m")], str(state / "lease.json"), str(tmp_path))
    return installed_probe_argv(mode, program_path(str(state)), known, *args)  # type: ignore[arg-type]


def test_installed_then_run_by_the_launcher_then_answered_with_its_digest(tmp_path: Path, bin_dir: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    stale = state / ("probe-" + "0" * 64 + ".py")
    stale.write_text("an older version's copy\n")

    refused = _run(bin_dir, _argv(tmp_path, "run"))
    assert refused.returncode == PROBE_NOT_INSTALLED
    assert refused.stderr.startswith("lanes-probe: not installed")
    assert refused.stdout == ""

    installed = _run(bin_dir, _argv(tmp_path, "install"), stdin=PROBE_SCRIPT)
    assert installed.returncode == 0, installed.stderr
    copy = Path(program_path(str(state)))
    assert copy.read_text() == PROBE_SCRIPT
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    assert not stale.exists()
    whole = json.loads(installed.stdout)
    # The program's digest is the one the control node computes from the same answer.
    assert whole["digest"] == fact_digest(whole)
    observed, held = parse_probe_answer("local", installed.stdout, None)
    assert held.digest == whole["digest"]

    again = _run(bin_dir, _argv(tmp_path, "run", known=held.digest))
    assert again.returncode == 0, again.stderr
    short = json.loads(again.stdout)
    assert set(short) == {"probe_version", "digest", "unchanged", "time", "meminfo", "disk", "disks"}
    assert (short["unchanged"], short["digest"]) == (True, held.digest)
    assert len(again.stdout) < len(installed.stdout) / 2
    reused, kept = parse_probe_answer("local", again.stdout, held)
    assert kept is held
    assert reused.info is not None
    assert observed.info is not None
    # The held host facts, with the disks read afresh (this machine's free bytes move between two runs).
    assert dataclasses.replace(reused.info, disks={}) == dataclasses.replace(observed.info, disks={})
    assert set(reused.info.disks) == set(observed.info.disks)
    assert reused.memory is not None
    assert reused.probed_at is not None
    assert observed.probed_at is not None
    assert reused.probed_at >= observed.probed_at

    # A stale digest (facts the caller no longer holds) gets the whole answer.
    stale_digest = _run(bin_dir, _argv(tmp_path, "run", known="f" * 64))
    assert "unchanged" not in json.loads(stale_digest.stdout)


def test_meminfo_sent_is_the_lines_the_parser_reads(tmp_path: Path, bin_dir: Path) -> None:
    result = _run(bin_dir, _argv(tmp_path, "install"), stdin=PROBE_SCRIPT)
    keys = [line.split(":")[0] for line in json.loads(result.stdout)["meminfo"].splitlines()]
    assert sorted(keys) == ["Cached", "MemAvailable", "MemFree", "MemTotal"]


def test_an_altered_copy_is_never_run(tmp_path: Path, bin_dir: Path) -> None:
    assert _run(bin_dir, _argv(tmp_path, "install"), stdin=PROBE_SCRIPT).returncode == 0
    copy = Path(program_path(str(tmp_path / "state")))
    marker = tmp_path / "ran"
    copy.write_text(f"open({str(marker)!r}, 'w').write('ran')\n" + PROBE_SCRIPT)
    result = _run(bin_dir, _argv(tmp_path, "run"))
    assert result.returncode == PROBE_NOT_INSTALLED
    assert "does not match its hash" in result.stderr
    assert not marker.exists()


def test_an_install_whose_bytes_do_not_match_the_hash_is_refused(tmp_path: Path, bin_dir: Path) -> None:
    result = _run(bin_dir, _argv(tmp_path, "install"), stdin=PROBE_SCRIPT + "\n# altered on the way\n")
    assert result.returncode == 2
    assert "does not match its hash" in result.stderr
    assert not Path(program_path(str(tmp_path / "state"))).exists()
    assert PROBE_PROGRAM_SHA256 in program_path("/var/lib/lanes/")
