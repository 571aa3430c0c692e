"""`lanes status --daemon URL`: the running daemon's own view, with what stands in its way.

The journal tells what the lanes did; only the daemon knows what it is doing
now and what keeps it from converging: a journal it cannot write, a git remote
that does not answer, a lane blocked by another reconciler's lease. Its
/status endpoint says all of it; this asks it and words it for a person.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

STATUS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DaemonView:
    url: str
    status: dict[str, Any] | None
    error: str | None

    def as_json(self) -> dict[str, Any]:
        if self.status is None:
            return {"url": self.url, "reachable": False, "error": self.error}
        return {"url": self.url, "reachable": True, **{k: v for k, v in self.status.items() if k != "lanes"}}


def ask_daemon(url: str, timeout: float = STATUS_TIMEOUT_S) -> DaemonView:
    """GET {url}/status; any failure is said, never raised: status must show what it can."""
    base = url.rstrip("/")
    if "://" not in base:
        base = f"http://{base}"
    try:
        response = httpx.get(f"{base}/status", timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return DaemonView(base, None, f"not answering: {type(exc).__name__}: {exc}")
    if response.status_code != 200:
        return DaemonView(base, None, f"/status answered HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("lanes"), list):
        return DaemonView(base, None, "/status did not answer a lanes daemon's JSON")
    return DaemonView(base, body, None)


def _ago(since: Any, now: float) -> str:
    return f"{max(0.0, now - float(since)):.0f} s" if isinstance(since, int | float) else "?"


def trouble_lines(view: DaemonView, now: float | None = None) -> list[tuple[str, str]]:
    """(color, text) lines for the top of `lanes status`: the daemon's phase, then each obstacle."""
    now = time.time() if now is None else now
    if view.status is None:
        return [("red", f"daemon at {view.url}: {view.error}")]
    status = view.status
    head = str(status.get("head") or "")[:12] or "no commit yet"
    lines = [("green", f"daemon at {view.url}: {status.get('phase', '?')}, at {head}")]
    store = status.get("store") or {}
    if store.get("writable") is False:
        lines.append(
            (
                "red",
                f"journal {store.get('path')} not writable for {_ago(store.get('since'), now)} "
                f"({store.get('problem')}); {store.get('held_writes', 0)} record(s) held in memory; "
                "no host is changed until it can be written",
            )
        )
    source = status.get("source") or {}
    if source.get("ok") is False:
        failures = int(source.get("failures") or 0)
        lines.append(
            (
                "yellow",
                f"fetch of {source.get('url')} failing for {_ago(source.get('failing_since'), now)} "
                f"({failures} attempt{'s' if failures != 1 else ''}): {source.get('error')}; "
                "the last fetched commit keeps running",
            )
        )
    for lane, why in sorted((status.get("blocked") or {}).items()):
        lines.append(("yellow", f"{lane} blocked: {why}"))
    for op in status.get("operations") or []:
        lanes = ", ".join(str(lane) for lane in op.get("lanes") or [])
        by = f"; preempted by {str(op['preempted_by'])[:12]}, ending" if op.get("preempted_by") else ""
        lines.append(
            ("cyan", f"applying {lanes} at {str(op.get('commit'))[:12]} for {_ago(op.get('started'), now)}{by}")
        )
    return lines


def needs_attention(view: DaemonView) -> bool:
    """Exit 1 for scripts: the daemon is unreachable or cannot write its journal."""
    if view.status is None:
        return True
    return (view.status.get("store") or {}).get("writable") is False
