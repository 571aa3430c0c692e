"""The daemon's HTTP face: which of its parts answer /healthz, /status, /metrics, /webhook and the dashboard.

Kept apart from the service loop (`service.py`): the routes only read the daemon's state, and a push
webhook only kicks its trigger; nothing here reconciles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from reconciler.daemon.conditions import health
from reconciler.daemon.control import control_handler
from reconciler.daemon.dashroute import serve_page
from reconciler.daemon.hookroute import receive_push
from reconciler.daemon.http import HttpServer, Limits, Request, Response
from reconciler.notifications import hub as notifications

if TYPE_CHECKING:
    from reconciler.daemon.service import Daemon


def http_server(d: Daemon) -> HttpServer | None:
    """The daemon's endpoint as `[http]` configures it, or None when it is off."""
    http = d.config.http
    if not http.enabled:
        return None

    def healthz() -> tuple[bool, str]:
        return health(d.phase, d.store, d.source, d.decider.blocked)

    async def page(request: Request) -> Response:
        return await serve_page(d, request)

    def metrics() -> tuple[bytes, str]:
        d.status()  # the lane gauges are rebuilt from the status rows
        d.metrics.set_notifications_queued(notifications.queued())
        return d.metrics.render()

    async def webhook(headers: Mapping[str, str], body: bytes) -> tuple[int, str]:
        status, text, fetch = receive_push(http.webhook_secret_file, d.config.repo.branch, headers, body, d.deliveries)
        if fetch:
            d.trigger.kick("webhook")
        return status, text

    return HttpServer(
        http.listen,
        health=healthz,
        status=d.status,
        metrics=metrics,
        webhook=webhook,
        pages=page if http.dashboard else None,
        control=control_handler(d),
        limits=Limits(
            max_connections=http.max_connections,
            head_timeout_s=http.head_timeout_s,
            body_timeout_s=http.body_timeout_s,
            max_body=http.max_body_bytes,
        ),
    )
