"""The probe program's session (`serve`), run for real: several requests on one process, an unchanged host
answered with its digest and a changed fact with the whole answer, the end of stdin ending it, and a bad request
ending it with a message, exactly as the control node's own reading of a request (`probe_serve`) refuses it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.facts.commands import PROBE_SCRIPT, installed_probe_argv, probe_session_argv
from reconciler.facts.probe_digest import fact_digest
from reconciler.facts.probe_program import PROBE_NOT_INSTALLED, program_path
from reconciler.facts.probe_serve import REQUEST_MAX_BYTES, read_request_line, request_line
from tests.facts.probeprocs import isolated, run_probe

pytestmark = pytest.mark.timeout(60)


class Serving:
    """The real program in `serve` mode as a child process: one request line in, one answer line out."""

    def __init__(self, bin_dir: Path, state: Path) -> None:
        self.proc = subprocess.Popen(
            isolated(probe_session_argv(program_path(str(state)))),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": str(bin_dir)},
        )

    def ask(self, line: str | bytes) -> bytes:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line.encode() if isinstance(line, str) else line)
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def end(self) -> tuple[int, str]:
        """Close stdin and wait: (exit status, stderr)."""
        assert self.proc.stdin is not None
        assert self.proc.stderr is not None
        with contextlib.suppress(BrokenPipeError):  # it ended already
            self.proc.stdin.close()
        status = self.proc.wait(timeout=30)
        return status, self.proc.stderr.read().decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def state(tmp_path: Path, bin_dir: Path) -> Path:
    state = tmp_path / "state"
    installed = run_probe(
        bin_dir,
        installed_probe_argv("install", program_path(str(state)), None, [], "", str(tmp_path)),
        stdin=PROBE_SCRIPT,
    )
    assert installed.returncode == 0, installed.stderr
    return state


@pytest.fixture
def serving(bin_dir: Path, state: Path) -> Iterator[Serving]:
    session = Serving(bin_dir, state)
    try:
        yield session
    finally:
        session.kill()


def _line(tmp_path: Path, known: str | None) -> str:
    return request_line(known, [str(tmp_path / "models" / "m")], str(tmp_path / "state" / "lease.json"), str(tmp_path))


def test_several_requests_on_one_process_and_the_end_of_stdin_ends_it(tmp_path: Path, serving: Serving) -> None:
    whole = json.loads(serving.ask(_line(tmp_path, None)))
    assert whole["digest"] == fact_digest(whole)  # the control node's digest of the same answer
    assert whole["models"] == {str(tmp_path / "models" / "m"): {"bytes": 0, "exists": False}}
    # Unchanged: the digest and the volatile figures only, each time, on the same process.
    for _ in range(3):
        short = json.loads(serving.ask(_line(tmp_path, whole["digest"])))
        assert set(short) == {"probe_version", "digest", "unchanged", "time", "meminfo", "disk", "disks"}
        assert (short["unchanged"], short["digest"]) == (True, whole["digest"])
    # A fact that changed (a model arrived): the whole answer, gathered afresh.
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "w.safetensors").write_bytes(b"x" * 1234)
    changed = json.loads(serving.ask(_line(tmp_path, whole["digest"])))
    assert "unchanged" not in changed
    assert changed["models"] == {str(tmp_path / "models" / "m"): {"bytes": 1234, "exists": True}}
    assert changed["digest"] != whole["digest"]
    assert serving.end() == (0, "")


BAD = [
    b"{not json\n",
    b"\xff\xfe\n",
    b"[]\n",
    b'{"known": null}\n',
    b'{"disk_path": "/", "known": null, "lease_file": "", "model_paths": [], "more": 1}\n',
    b'{"disk_path": "/", "known": 7, "lease_file": "", "model_paths": []}\n',
    b'{"disk_path": 1, "known": null, "lease_file": "", "model_paths": []}\n',
    b'{"disk_path": "/", "known": null, "lease_file": "", "model_paths": "/m"}\n',
    b'{"disk_path": "/", "known": null, "lease_file": "", "model_paths": [1]}\n',
    b'{"disk_path": "/", "known": null, "lease_file": "", "model_paths": []' + b" " * REQUEST_MAX_BYTES + b"}\n",
]


@pytest.mark.parametrize("line", BAD, ids=range(len(BAD)))
def test_a_bad_request_ends_it_with_a_message_as_the_control_nodes_reading_refuses_it(
    tmp_path: Path, serving: Serving, line: bytes
) -> None:
    with pytest.raises(ValueError, match=r"not JSON|keys|known|must be|request over"):
        read_request_line(line.decode("utf-8", errors="replace"))
    assert json.loads(serving.ask(_line(tmp_path, None)))["digest"]  # a good request first: answered
    assert serving.ask(line) == b""  # no answer: it ended
    status, err = serving.end()
    assert status == 2
    assert err.startswith("lanes-probe: ")
    assert "malformed request" in err or f"request over {REQUEST_MAX_BYTES} bytes" in err


def test_a_request_line_the_control_node_builds_is_one_the_program_reads(tmp_path: Path, serving: Serving) -> None:
    for known, paths in ((None, []), ("f" * 64, ["/a b", "/ü\n/x", '/"q"'])):
        line = request_line(known, paths, "/l", str(tmp_path))
        assert line.count("\n") == 1
        assert read_request_line(line).model_paths == tuple(paths)
        answer = json.loads(serving.ask(line))
        assert sorted(answer["models"]) == sorted(paths)
    assert serving.end() == (0, "")


def test_a_session_is_refused_when_the_copy_is_missing(tmp_path: Path, bin_dir: Path) -> None:
    session = Serving(bin_dir, tmp_path / "elsewhere")
    try:
        status, err = session.end()
    finally:
        session.kill()
    assert status == PROBE_NOT_INSTALLED
    assert err.startswith("lanes-probe: not installed")


def test_the_facts_commands_never_read_the_sessions_stdin(tmp_path: Path, bin_dir: Path, state: Path) -> None:
    """stdin carries the requests: a child (docker here) that inherited it could swallow the next one."""
    seen = tmp_path / "docker-stdin"
    (bin_dir / "docker").write_text(
        f"#!{os.path.realpath(bin_dir / 'python3')}\nimport os\n"
        f"open({str(seen)!r}, 'a').write(os.readlink('/proc/self/fd/0') + '\\n')\n"
    )
    (bin_dir / "docker").chmod(0o755)
    session = Serving(bin_dir, state)
    try:
        assert json.loads(session.ask(_line(tmp_path, None)))["digest"]
        assert session.end() == (0, "")
    finally:
        session.kill()
    assert set(seen.read_text().splitlines()) == {"/dev/null"}
