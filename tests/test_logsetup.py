"""Logs go to the chosen stream as JSON lines, with every known secret value redacted."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest
import structlog

from reconciler.logsetup import configure

pytestmark = pytest.mark.timeout(10)


def test_secret_values_are_redacted_from_every_field() -> None:
    out = io.StringIO()
    canary = "hf_CANARY_0123456789abcdef"
    configure("info", json_lines=True, secrets=[canary], stream=out)
    try:
        structlog.get_logger("t").info("lane.applied", lane="x", detail=f"token={canary} leaked?", host="dgx1")
    finally:
        configure("warning")
    line = json.loads(out.getvalue().strip())
    assert canary not in out.getvalue()
    assert line["detail"] == "token=[redacted] leaked?" and line["lane"] == "x" and line["event"] == "lane.applied"


def test_nested_values_and_exceptions_are_redacted_too() -> None:
    out = io.StringIO()
    canary = "hf_CANARY_nested_0123456789"
    configure("info", json_lines=True, secrets=[canary], stream=out)
    try:
        structlog.get_logger("t").info(
            "step.failed",
            argv=["sh", "-c", f"echo {canary}"],
            response={"body": {"token": canary}, "codes": (1, canary)},
            error=RuntimeError(f"refused {canary}"),
            count=3,
        )
    finally:
        configure("warning")
    assert canary not in out.getvalue()
    line = json.loads(out.getvalue().strip())
    assert line["argv"] == ["sh", "-c", "echo [redacted]"]
    assert line["response"] == {"body": {"token": "[redacted]"}, "codes": [1, "[redacted]"]}
    assert line["error"] == "RuntimeError: refused [redacted]" and line["count"] == 3


def test_library_warnings_come_out_as_our_lines_redacted() -> None:
    """asyncssh, apscheduler and httpx log through stdlib logging: their lines are redacted and formatted too."""
    out = io.StringIO()
    canary = "hf_CANARY_stdlib_0123456789"
    configure("info", json_lines=True, secrets=[canary], stream=out)
    try:
        logging.getLogger("asyncssh").info("Opening SSH connection (info is library chatter, not kept)")
        logging.getLogger("asyncssh").warning("auth failed for %s", f"user:{canary}")
        try:
            raise RuntimeError(f"refused {canary}")
        except RuntimeError:
            logging.getLogger("apscheduler.executors").exception("job raised")
    finally:
        configure("warning")
    assert canary not in out.getvalue()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(x["logger"], x["level"], x["event"]) for x in lines] == [
        ("asyncssh", "warning", "auth failed for user:[redacted]"),
        ("apscheduler.executors", "error", "job raised"),
    ]
    assert "RuntimeError: refused [redacted]" in lines[1]["exception"]
    assert len([h for h in logging.getLogger().handlers if type(h).__name__ == "_LibraryLogHandler"]) == 1


def test_lines_to_the_journal_carry_their_priority_and_others_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd sets JOURNAL_STREAM to the DEV:INODE of the stream it reads; only lines to that stream get `<N>`."""
    path = tmp_path / "journal"
    with open(path, "w") as journal, open(tmp_path / "other", "w") as other:
        st = os.fstat(journal.fileno())
        monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
        for stream in (journal, other):
            configure("debug", json_lines=True, stream=stream)
            try:
                log = structlog.get_logger("t")
                log.debug("a.debug")
                log.info("lane.applied", lane="x")
                log.warning("a.warning")
                log.error("a.error")
                logging.getLogger("asyncssh").warning("library says so")
            finally:
                configure("warning")
    lines = path.read_text().splitlines()
    assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<4>"]
    assert json.loads(lines[1][3:])["event"] == "lane.applied"
    plain = (tmp_path / "other").read_text().splitlines()
    assert len(plain) == 5 and all(line.startswith("{") for line in plain)


def test_a_console_traceback_shows_no_frame_locals() -> None:
    """A local of a failing frame may hold a secret the redactor never saw (it reads the event's fields):
    structlog's console default with rich installed prints every frame's locals; lanes' console prints none."""
    out = io.StringIO()
    configure("info", json_lines=False, stream=out)
    try:
        local_only = "a-value-held-only-in-a-local-" + "0123"
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            structlog.get_logger("t").exception("step.failed")
        assert local_only
    finally:
        configure("warning")
    assert "RuntimeError: boom" in out.getvalue() and "Traceback" in out.getvalue()
    assert "a-value-held-only-in-a-local-0123" not in out.getvalue()
