"""A simulated Spark's probe session, driven over real SSH as the control node drives it.

As strict as the real program (`tests/facts/test_probe_serve.py` runs that): the session's argv must be what
`facts.commands` builds and the installed copy must match its hash before anything is read; each request line
is answered from the host's facts, counted with its bytes; a malformed or oversized request ends the session
with the program's message; end of stdin ends it quietly.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh
import pytest

from reconciler.facts import commands as fc
from reconciler.facts.probe_program import PROBE_NOT_INSTALLED, program_path
from reconciler.facts.probe_serve import REQUEST_MAX_BYTES, request_line
from reconciler.sim.registry import SimRegistry
from reconciler.sim.sshd import SimFleet

pytestmark = pytest.mark.timeout(60)

STATE = "/var/lib/lanes"
WHERE = program_path(STATE)
LINE = request_line(None, ["/srv/models/x"], f"{STATE}/lease.json", "/srv")


@pytest.fixture
async def fleet(registry: SimRegistry, tmp_path: Path) -> AsyncIterator[SimFleet]:
    async with SimFleet(["spark1"], base_address="127.79.27.", registry=registry, work_dir=tmp_path / "f") as fleet:
        yield fleet


def _install(fleet: SimFleet) -> None:
    request = fc.read_probe_argv(fc.installed_probe_argv("install", WHERE, None, [], f"{STATE}/lease.json", "/"))
    assert fleet.runtime("spark1").probe_files.install(request, fc.PROBE_SCRIPT) is None


async def _session(fleet: SimFleet, argv: list[str], lines: list[str]) -> tuple[list[str], int | None, str]:
    """Open a session, send each line after the previous answer, then end stdin: (answers, exit status, stderr)."""
    async with asyncssh.connect(**fleet.connect_options("spark1")) as conn:
        process = await conn.create_process(shlex.join(argv))
        answers = []
        for line in lines:
            try:
                process.stdin.write(line)
            except BrokenPipeError:
                break  # the host ended the session already (a launcher that refused)
            answer = await process.stdout.readline()
            if not answer:
                break
            answers.append(answer)
        if not process.is_closing():
            process.stdin.write_eof()
        done = await process.wait(check=False)
        return answers, done.exit_status, str(done.stderr)


async def test_requests_are_answered_on_one_channel_and_counted(fleet: SimFleet) -> None:
    _install(fleet)
    host = fleet.host("spark1")
    (first,), status, err = await _session(fleet, fc.probe_session_argv(WHERE), [LINE])
    whole = json.loads(first)
    assert (status, err, whole["models"]) == (0, "", {"/srv/models/x": {"bytes": 0, "exists": False}})
    unchanged = request_line(whole["digest"], ["/srv/models/x"], f"{STATE}/lease.json", "/srv")
    channels, handshakes = host.channels, host.handshakes
    answers, status, _ = await _session(fleet, fc.probe_session_argv(WHERE), [unchanged, unchanged, unchanged])
    assert [json.loads(a)["unchanged"] for a in answers] == [True, True, True]
    assert status == 0  # stdin ended: the program's loop ends
    assert (host.channels, host.handshakes) == (channels + 1, handshakes + 1)  # three requests, one channel
    assert host.requests == 4
    assert len(host.commands) == 4  # each request is one probe
    assert host.bytes_in == 2 * len(shlex.join(fc.probe_session_argv(WHERE))) + len(LINE) + 3 * len(unchanged)
    assert host.bytes_out == sum(len(a.encode()) for a in [first, *answers])


async def test_a_missing_copy_is_refused_before_any_request_is_read(fleet: SimFleet) -> None:
    answers, status, err = await _session(fleet, fc.probe_session_argv(WHERE), [LINE])
    assert (answers, status) == ([], PROBE_NOT_INSTALLED)
    assert err.startswith("lanes-probe: not installed")
    assert fleet.host("spark1").requests == 0


async def test_an_argv_other_than_the_builders_is_refused(fleet: SimFleet) -> None:
    _install(fleet)
    for argv in (
        [*fc.probe_session_argv(WHERE), "--extra"],
        [*fc.probe_session_argv(WHERE)[:-1], "0" * 64],
        [*fc.probe_session_argv(WHERE)[:3], "print(1)", *fc.probe_session_argv(WHERE)[4:]],
    ):
        answers, status, err = await _session(fleet, argv, [LINE])
        assert (answers, status) == ([], 2), err
        assert "argv differs from what reconciler.facts.commands builds" in err or "malformed" in err
    assert fleet.host("spark1").requests == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json\n", "malformed request: not JSON"),
        ('{"known": null}\n', "malformed request: not an object of exactly the keys"),
        (LINE.replace('"known":null', '"known":3'), "malformed request: known is neither"),
        ("[" + "1," * (REQUEST_MAX_BYTES // 2) + "1]\n", f"request over {REQUEST_MAX_BYTES} bytes"),
    ],
    ids=["not-json", "keys", "known", "oversized"],
)
async def test_a_bad_request_ends_the_session_with_the_programs_message(
    fleet: SimFleet, line: str, message: str
) -> None:
    _install(fleet)
    answers, status, err = await _session(fleet, fc.probe_session_argv(WHERE), [LINE, line, LINE])
    assert len(answers) == 1  # the good request before it was answered; nothing after it
    assert status == 2
    assert err.startswith(f"lanes-probe: {message}")
