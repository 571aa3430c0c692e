"""Logs go to the chosen stream as JSON lines, with every known secret value redacted."""

from __future__ import annotations

import io
import json

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
