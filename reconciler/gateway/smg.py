"""Shepherd Model Gateway (SMG, `smg` 1.13.0 on PyPI) behind `reconciler.gateway.router.Router`.

What is encoded here was read from the 1.13.0 wheel and SMG's sources (github.com/smg-project/smg, formerly
lightseekorg/smg and the SGLang router), and checked against the real binary by tests/gateway:

- the worker API: `POST /workers` with a `WorkerSpec` body (`url`, and `models: [{"id": ...}]`: the model
  names it serves; SMG ignores a `model_id` field there and would ask the engine's /v1/models instead) answers
  202 with `worker_id` and queues the registration; a URL it holds already answers 409 WORKER_ALREADY_EXISTS
  (model_gateway/src/worker/service.rs `create_worker`). `GET /workers` lists `{"workers": [WorkerInfo],
  "total", "stats"}`, each with `id`, `url`, `model_id`, `models`, `is_healthy` and `status` (pending, ready,
  not_ready, failed, draining: crates/protocols/src/worker.rs `WorkerStatus`; only `ready` is routable).
  `DELETE /workers/{id}` answers 202 and drains: the worker lists as `draining` for the drain settle time (5 s,
  the Rust core's `drain_settle_secs`, which the launcher does not expose), then is gone; 404 for an unknown id.
- a registration is a background job: the worker appears once SMG reached it (detect_connection_mode,
  metadata discovery), and gets traffic only once its health checks pass (`--health-success-threshold`
  probes of `--health-check-endpoint`, /health by default, every `--health-check-interval-secs`). An
  unreachable URL never appears: the next reconcile adds it again.
- authentication: the worker routes sit behind the control-plane middleware when `--control-plane-api-keys
  id:name:admin:KEY` is given; a request carries `Authorization: Bearer KEY` (docs/getting-started/
  control-plane-operations.md); without it or with another key SMG answers 401.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from reconciler.gateway.router import RouterError, Worker

MAX_ANSWER_BYTES = 4 * 1024 * 1024
DEADLINE_S = 30.0  # the whole of one call, head and body (TIMEOUT_S bounds each read)
"""The most bytes read of one answer: a worker listing is ~600 bytes a worker, so ~7,000 workers fit."""
MAX_WORKERS = 4096
"""The most workers one listing may name; more is not a gateway lanes drives (a fleet has tens of lanes)."""
TIMEOUT_S = 10.0
"""Per call: SMG answers the control plane from memory (registration is queued), so seconds are plenty."""
MAX_FIELD = 512
"""Longest id, URL, model name or status taken from an answer."""
_WORKER_ID = re.compile(r"^[0-9a-fA-F-]{1,64}$")
"""SMG's worker ids are UUIDs (WorkerService::parse_worker_id); anything else never reaches a URL path."""


HOLDING_RESILIENCE = {"disable_retry": True, "retryable_status_codes": []}
"""A holding worker's overrides (`WorkerSpec.resilience`, SMG's `ResilienceUpdate`): no retries of its 503, and
no status counted for its circuit breaker, so each client gets the holding answer with its Retry-After once.
Checked against the 1.13.0 binary: with the defaults SMG sent each request 3-4 times and, its breaker open
after ten, answered `Retry-After: 1` itself; `disable_circuit_breaker` there did not keep the breaker shut."""


class SmgRouter:
    """SMG's control plane at `base_url` (http://127.0.0.1:30000), authenticated with its admin `key`."""

    def __init__(self, base_url: str, key: str, *, client: httpx.AsyncClient | None = None) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {key}"}
        # No proxies from the environment: the gateway is on this machine, and the key must not travel.
        self._client = client or httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False, follow_redirects=False)
        self._own_client = client is None

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def list_workers(self) -> list[Worker]:
        status, body = await self._call("GET", "/workers")
        if status != 200:
            raise RouterError(f"SMG GET /workers answered {status}: {_said(body)}")
        return parse_workers(_json(body, "GET /workers"))

    async def add_worker(self, url: str, model: str, *, holding: bool = False) -> None:
        payload: dict[str, Any] = {"url": url, "models": [{"id": model}]}
        if holding:
            payload["resilience"] = HOLDING_RESILIENCE
        status, body = await self._call("POST", "/workers", payload)
        if status == 409:
            return  # held already (a concurrent pass registered it): what was wanted
        if status not in (200, 201, 202):
            raise RouterError(f"SMG POST /workers {url} ({model}) answered {status}: {_said(body)}")

    async def remove_worker(self, worker: Worker) -> None:
        if not _WORKER_ID.fullmatch(worker.id):
            raise RouterError(f"SMG worker id {worker.id[:80]!r} is not a UUID; not removed")
        status, body = await self._call("DELETE", f"/workers/{worker.id}")
        if status == 404:
            return  # gone already
        if status not in (200, 202, 204):
            raise RouterError(f"SMG DELETE /workers/{worker.id} ({worker.url}) answered {status}: {_said(body)}")

    async def _call(self, method: str, path: str, payload: Mapping[str, Any] | None = None) -> tuple[int, bytes]:
        request = self._client.build_request(
            method, self._base + path, headers=self._headers, json=payload, timeout=TIMEOUT_S
        )
        try:
            # httpx's timeout is per read: a trickling answer under it would hold the caller for as long as the
            # gateway likes, so the whole call, head and body, has one deadline.
            async with asyncio.timeout(DEADLINE_S):
                return await self._send(request, method, path)
        except TimeoutError:
            raise RouterError(f"SMG {method} {path} at {self._base}: no whole answer in {DEADLINE_S:.0f} s") from None

    async def _send(self, request: httpx.Request, method: str, path: str) -> tuple[int, bytes]:
        try:
            response = await self._client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                total = 0
                async for chunk in response.aiter_raw():
                    total += len(chunk)
                    if total > MAX_ANSWER_BYTES:
                        raise RouterError(f"SMG {method} {path}: answer exceeds {MAX_ANSWER_BYTES} bytes; not read")
                    chunks.append(chunk)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            raise RouterError(f"SMG {method} {path} at {self._base}: {type(exc).__name__}: {exc}") from None
        return response.status_code, b"".join(chunks)


def parse_workers(doc: Any) -> list[Worker]:
    """The workers of a `GET /workers` answer; refuses a shape other than SMG's rather than guess."""
    if not isinstance(doc, dict) or not isinstance(doc.get("workers"), list):
        raise RouterError("SMG GET /workers: no `workers` list in the answer")
    items = doc["workers"]
    if len(items) > MAX_WORKERS:
        raise RouterError(f"SMG GET /workers lists {len(items)} workers, more than {MAX_WORKERS}; not read")
    out: list[Worker] = []
    for item in items:
        if not isinstance(item, dict):
            raise RouterError("SMG GET /workers: a worker that is not an object")
        ident, url = item.get("id"), item.get("url")
        if not isinstance(ident, str) or not isinstance(url, str) or not ident or not url:
            raise RouterError("SMG GET /workers: a worker without its id or url")
        model = item.get("model_id")
        status = item.get("status")
        if not isinstance(status, str):
            # Older SMG answers only `is_healthy`; a worker it holds and calls unhealthy is still held.
            status = "ready" if item.get("is_healthy") is True else "not_ready"
        out.append(
            Worker(
                id=ident[:MAX_FIELD],
                url=url[:MAX_FIELD],
                model=model[:MAX_FIELD] if isinstance(model, str) and model else None,
                status=status[:MAX_FIELD],
            )
        )
    return out


def _json(body: bytes, where: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        raise RouterError(f"SMG {where}: the answer is not JSON: {_said(body)}") from None


def _said(body: bytes) -> str:
    """What SMG said, short and printable, for an error message."""
    text = body[:300].decode("utf-8", "replace")
    return "".join(ch if ch.isprintable() else " " for ch in text).strip() or "(empty)"
