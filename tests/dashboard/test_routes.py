"""The daemon's HTTP server hands / and /lanes/... to the dashboard, GET and HEAD only, and nothing else."""

from __future__ import annotations

import httpx
import pytest

from reconciler.daemon.http import HttpServer, Request, Response

pytestmark = pytest.mark.timeout(20)


async def test_pages_are_routed_by_path_and_method() -> None:
    seen: list[str] = []

    async def pages(request: Request) -> Response:
        seen.append(request.path)
        return Response(200, b"<!doctype html><p>page</p>", "text/html; charset=utf-8")

    with_pages = HttpServer("127.0.0.1:0", health=lambda: (True, ""), pages=pages)
    without = HttpServer("127.0.0.1:0", health=lambda: (True, ""))
    await with_pages.start()
    await without.start()
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.get(with_pages.url + "/")).text.endswith("<p>page</p>")
            assert (await client.get(with_pages.url + "/lanes/a%20b?x=1")).status_code == 200
            assert (await client.head(with_pages.url + "/lanes/x")).status_code == 200
            assert (await client.get(with_pages.url + "/lanesx")).status_code == 404
            assert (await client.get(with_pages.url + "/healthz")).text == "ok\n"
            post = await client.post(with_pages.url + "/", content=b"x")
            assert post.status_code == 405 and post.headers["allow"] == "GET, HEAD"
            assert (await client.get(without.url + "/")).status_code == 404
    finally:
        await with_pages.close()
        await without.close()
    assert seen == ["/", "/lanes/a%20b", "/lanes/x"]  # the query is not part of the path
