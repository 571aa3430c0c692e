"""GET / and /lanes/<name>: the dashboard's pages, from what the daemon holds, behind its access rule.

The overview reads only memory and the journal (the last cycle's verdict and
probe, the lane records, the upstream gap); a lane page also walks git
history, in a thread under the mirror's lock so a fetch never moves refs
under it. Pages are never cached and may not be framed or load anything.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import structlog

from reconciler.daemon.http import Request, Response, is_loopback
from reconciler.dashboard.access import refusal
from reconciler.dashboard.gather import lane_git, lane_journal
from reconciler.dashboard.lanepage import LaneData, render_lane
from reconciler.dashboard.overview import render_overview
from reconciler.dashboard.snapshot import Snapshot
from reconciler.source.history import LaneChange, WalkStoppedError
from reconciler.store.status import status_rows
from reconciler.upstream import UpstreamStore, gap_rows

log = structlog.get_logger("lanes.dashboard")

if TYPE_CHECKING:
    from reconciler.daemon.service import Daemon

PAGE_WORK_S = 10.0
"""Git work of one lane page, at most (a third of the HTTP handler's 30 s timeout): then 503, the lock freed."""

HTML = "text/html; charset=utf-8"
HEADERS = {
    # No script, no frame, nothing fetched: the pages are one document each (inline style and SVG only).
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
}


def snapshot(daemon: Daemon) -> Snapshot:
    decider = daemon.decider
    desired = decider.last_desired
    last = decider.last_result
    gaps, gap_error = None, None
    if desired is not None:
        try:
            with UpstreamStore(daemon.config.daemon.db) as upstream:
                gaps = gap_rows(desired, upstream)
        except sqlite3.Error as exc:  # the journal's disk may refuse the upstream tables' creation
            log.warning("dashboard.gap_unreadable", error=str(exc))
            gap_error = f"the upstream records cannot be read: {exc}"
    return Snapshot(
        phase=daemon.phase,
        owner=daemon.config.daemon.owner,
        head=daemon.last_head,
        rows=status_rows(daemon.store, desired),
        blocked=dict(decider.blocked),
        refused=decider.refused,
        retry_at={lane: at for lane, (_, at) in daemon.store.retry_schedule().items()},
        desired=desired,
        check=last.verdict.to_json() if last is not None else None,
        observed=last.observed if last is not None else None,
        gaps=gaps,
        gap_error=gap_error,
        gateway=daemon.gateway.last if daemon.config.gateway.enabled else None,
        now=time.time(),
    )


async def serve_page(daemon: Daemon, request: Request) -> Response:
    http = daemon.config.http
    denied = refusal(request.headers, loopback=is_loopback(http.host_port[0]), token_file=http.dashboard_token_file)
    if denied is not None:
        return Response(denied.status, (denied.text + "\n").encode(), headers=denied.headers)
    snap = snapshot(daemon)
    if request.path == "/":
        return Response(200, render_overview(snap).encode(), HTML, HEADERS)
    lane = unquote(request.path.removeprefix("/lanes/"))
    known = {row["name"] for row in snap.rows}
    if lane not in known:
        return Response(404, b"no such lane\n")
    # The newest head the decider verified, never merely the newest fetched: a refused head's files are
    # not shown as the lane's history (nor parsed for it), however they were pushed.
    head = daemon.decider.trusted
    changes: list[LaneChange] = []
    evidence: list[tuple[str, dict[str, Any]]] = []
    if head is not None:
        mirror = daemon.mirror
        over = threading.Event()
        deadline = time.monotonic() + PAGE_WORK_S

        def stop() -> bool:
            return over.is_set() or time.monotonic() > deadline

        def read() -> tuple[list[LaneChange], list[tuple[str, dict[str, Any]]]]:
            with mirror.lock:
                return lane_git(mirror.repo, head, lane, daemon.config.repo.state_dir, stop)

        try:
            changes, evidence = await asyncio.to_thread(read)
        except WalkStoppedError as exc:
            log.warning("dashboard.page_stopped", lane=lane, reason=str(exc))
            return Response(503, b"the lane's history took too long to read; `lanes history` reads it whole\n")
        finally:
            over.set()  # a cancelled request (the handler's timeout, a client gone) ends the thread's walk too
    applies, decisions = lane_journal(daemon.store, lane, [c.commit for c in changes])
    data = LaneData(lane, changes, applies, decisions, evidence)
    # The page is named after the head its history was read at: the accepted one, not a refused newer one.
    return Response(200, render_lane(replace(snap, head=head), data).encode(), HTML, HEADERS)
