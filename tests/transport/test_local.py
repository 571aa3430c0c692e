"""LocalTransport: same results and errors as SSH, without sshd."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from reconciler.errors import HostUnreachableError, RemoteCommandError
from reconciler.transport import HostTarget, LocalTransport, Transport

pytestmark = pytest.mark.timeout(30)

HOST = HostTarget(name="spark1", address="127.0.0.1")


@pytest.fixture
def local() -> LocalTransport:
    return LocalTransport()


def test_satisfies_the_transport_protocol(local: LocalTransport) -> None:
    transport: Transport = local
    assert transport is local


async def test_runs_printf_without_a_shell(local: LocalTransport) -> None:
    result = await local.run(HOST, ["printf", "%s|", "a b", "$(id)", "; rm -rf /"])
    assert result.stdout == "a b|$(id)|; rm -rf /|"
    assert result.exit_status == 0
    assert result.host == "spark1"
    assert result.argv == ("printf", "%s|", "a b", "$(id)", "; rm -rf /")


async def test_stdin_passes_through(local: LocalTransport) -> None:
    code = "import sys; sys.stdout.write(sys.stdin.read().upper())"
    result = await local.run(HOST, [sys.executable, "-c", code], input="token\nline\n")
    assert result.stdout == "TOKEN\nLINE\n"


async def test_no_input_means_stdin_is_closed(local: LocalTransport) -> None:
    result = await local.run(HOST, [sys.executable, "-c", "import sys; print(len(sys.stdin.read()))"])
    assert result.stdout == "0\n"


async def test_nonzero_exit_raises_with_stderr_tail(local: LocalTransport) -> None:
    code = "import sys; sys.stderr.write('one\\ntwo\\n'); sys.exit(3)"
    with pytest.raises(RemoteCommandError) as caught:
        await local.run(HOST, [sys.executable, "-c", code])
    assert caught.value.host == "spark1"
    assert caught.value.exit_status == 3
    assert caught.value.stderr_tail == "one\ntwo"
    assert caught.value.argv[1:] == ["-c", code]


async def test_check_false_returns_the_status(local: LocalTransport) -> None:
    result = await local.run(HOST, [sys.executable, "-c", "raise SystemExit(4)"], check=False)
    assert result.exit_status == 4


async def test_missing_command_reads_like_a_shell(local: LocalTransport) -> None:
    result = await local.run(HOST, ["/nonexistent/lanes-tool"], check=False)
    assert result.exit_status == 127
    assert "command not found" in result.stderr
    with pytest.raises(RemoteCommandError):
        await local.run(HOST, ["/nonexistent/lanes-tool"])


async def test_empty_argv_is_refused(local: LocalTransport) -> None:
    with pytest.raises(ValueError, match="empty"):
        await local.run(HOST, [])


async def test_timeout_kills_the_process(local: LocalTransport, tmp_path: Path) -> None:
    pidfile, finished = tmp_path / "pid", tmp_path / "finished"
    code = (
        f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(30); "
        f"open({str(finished)!r}, 'w').close()"
    )
    with pytest.raises(HostUnreachableError, match=r"timed out after 1s running"):
        await local.run(HOST, [sys.executable, "-c", code], timeout=1.0)
    pid = int(pidfile.read_text())
    # The child was killed and reaped before it got to its end: no such process is left, and it never finished.
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not finished.exists()


async def test_env_for_host_sets_per_host_environment() -> None:
    local = LocalTransport(env_for_host=lambda host: {"RIG_HOST": host.name})
    code = "import os; print(os.environ['RIG_HOST'], 'PATH' in os.environ)"
    result = await local.run(HostTarget(name="spark2", address="10.0.0.2"), [sys.executable, "-c", code])
    assert result.stdout == "spark2 True\n"


async def test_killed_by_signal_has_no_exit_status(local: LocalTransport) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = await local.run(HOST, [sys.executable, "-c", code], check=False)
    assert result.exit_status is None
    with pytest.raises(RemoteCommandError, match="killed by signal"):
        await local.run(HOST, [sys.executable, "-c", code])
