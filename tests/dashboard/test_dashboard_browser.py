"""The dashboard in a real headless browser (Debian's chromium) against the real daemon on simulated Sparks.

The daemon benchmarks each change ([bench] on), so a lane has evidence over two commits; the second commit
suspends one lane and carries both secret values (the webhook's, a lane secret's) in its message, which the
lane pages show as history. Every panel is checked in the DOM the browser built, screenshots are written
under the test's folder (their paths printed), and no page, as sent or as rendered, holds a secret value.
The bearer token is checked with httpx: a browser cannot be given one on its command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from reconciler.cli.demo import DEMO_SECRET
from tests.dashboard.browser import dump_dom, need_chromium, screenshot
from tests.dashboard.dom import Node, parse
from tests.support.evidencerepo import evidence_files, lane_evidence
from tests.support.example import EUGR, PRODUCTION, example_state, fast, fast_files, loaded
from tests.support.lanesproc import WEBHOOK_SECRET
from tests.support.sparks import loopback
from tests.support.waiting import wait_for
from tests.support.world import world_over

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
_salt = itertools.count(1717)
QUICK = {"bench_profile": "quick"}
SECRETS = (WEBHOOK_SECRET, DEMO_SECRET)
TOKEN = "dashboard-token-for-tests-7f3a"


def section(doc: Node, ident: str) -> Node:
    return doc.one("section", id=ident)


def no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret value is in {where}"


async def get(url: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(url, headers=headers)


async def test_every_panel_in_chromium_with_no_secret_on_any_page(tmp_path: Path) -> None:
    need_chromium()
    state = fast(example_state())
    async with world_over(loaded(state), tmp_path, tmp_path / "simwork", loopback(next(_salt))) as w:
        first = w.commit("fleet, benchmarked", {PRODUCTION: QUICK, EUGR: QUICK})
        d = w.add_daemon("daemon", log_level="info")
        d.config.write_text(d.config.read_text() + "[bench]\nenabled = true\n")
        await d.start()
        await w.deployed(first)
        await wait_for(lambda: bool(lane_evidence(w, PRODUCTION)), 120, "production's first evidence")
        await wait_for(lambda: bool(lane_evidence(w, EUGR)), 120, "eugr's first evidence")

        # A change to production, eugr suspended, and both secret values in the message people will read.
        subject = f"production: 6 sequences (token {WEBHOOK_SECRET}, hf {DEMO_SECRET})"
        files = fast_files(**{PRODUCTION: {**QUICK, "max_num_seqs": 6}, EUGR: {**QUICK, "suspended": True}})
        second = w.repo.commit({**files, **evidence_files(w)}, subject)
        await w.deployed(second, lanes=(PRODUCTION,))
        await wait_for(lambda: len(lane_evidence(w, PRODUCTION)) == 2, 120, "production's evidence of the change")
        base = f"http://127.0.0.1:{d.port}"
        await wait_for_page(base + "/", lambda html: "suspended</span>:" in html, "the suspended lane shown")

        # -- as sent: every page, /status too, holds no secret ---------------------------------
        pages = ["/", *(f"/lanes/{quote(name)}" for name in sorted(state.lanes)), "/status"]
        for path in pages:
            r = await get(base + path)
            assert r.status_code == 200, (path, r.text[:500])
            no_secret(f"GET {path}", r.text)
            if path != "/status":
                assert r.headers["content-type"] == "text/html; charset=utf-8"
                assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none' forbids it
        assert (await get(base + "/lanes/no-such-lane")).status_code == 404

        # -- as rendered: the overview --------------------------------------------------------
        doc = parse(await dump_dom(base + "/"))
        no_secret("the overview's DOM", str(doc.text))
        lanes = {r[0]: r for r in section(doc, "lanes").rows()}
        assert sorted(lanes) == sorted(state.lanes)
        assert lanes[PRODUCTION][1] == "healthy" and lanes[PRODUCTION][3] == second[:12]
        assert "suspended" in lanes[EUGR][5]  # what it waits for
        assert lanes[EUGR][3] == first[:12]  # left alone on the first commit
        assert lanes[PRODUCTION][5] == "nothing"
        assert "pp" in lanes[PRODUCTION][7] and "tg" in lanes[PRODUCTION][7]  # the evidence headline
        links = {a.attrs["href"] for a in section(doc, "lanes").find_all("a")}
        assert links == {f"/lanes/{name}" for name in state.lanes}

        hosts = {r[0]: r for r in section(doc, "hosts").rows()}
        assert sorted(hosts) == sorted(state.hosts)
        assert all(r[1] == "reachable" for r in hosts.values()), hosts
        for rank, host in enumerate(state.lanes[PRODUCTION].hosts):
            assert f"lanes-{PRODUCTION}-r{rank}" in hosts[host][4]
        assert "memory available" in hosts["dgx1"][3] and "driver" in hosts["dgx1"][3]

        memory = section(doc, "memory")
        ranks = memory.rows()
        # One row per rank of every lane (each example host has a hardware profile), counted from the files.
        assert len(ranks) == sum(len(lane.hosts) for lane in state.lanes.values())
        assert len(memory.find_all("div", class_="bar")) == len(ranks)
        prod_rows = [r for r in ranks if r[0] == PRODUCTION]
        assert [r[2] for r in prod_rows] == list(state.lanes[PRODUCTION].hosts)
        assert all("--mem-fraction-static" in r[3] for r in prod_rows)  # SGLang's own flag for the budget
        for bar in memory.find_all("div", class_="bar"):
            assert bar.find_all("span", class_="weights") and bar.find_all("i", class_="budget")
            assert bar.attrs["aria-label"].startswith("weights ")

        gap = {r[0]: r for r in section(doc, "gap").rows()}
        assert sorted(gap) == sorted(state.lanes)
        assert "nothing recorded yet" in gap[PRODUCTION][5]  # [upstream] is off: the table says so

        # -- as rendered: a lane's history and evidence ----------------------------------------
        lane_doc = parse(await dump_dom(f"{base}/lanes/{PRODUCTION}"))
        no_secret("production's DOM", lane_doc.text)
        history = section(lane_doc, "history").rows()
        assert [r[0] for r in history] == [second[:12], first[:12]]
        before = state.lanes[PRODUCTION].max_num_seqs
        assert "[redacted]" in history[0][3] and f"max_num_seqs: {before} → 6" in history[0][3]
        assert history[0][4].startswith("applied") and "commit applied" in history[0][4]
        evidence = section(lane_doc, "evidence")
        trend = evidence.one("svg", role="img", aria_label=f"{PRODUCTION}: pp, tg and TTFT over 2 evidence files")
        assert [t.text for t in trend.find_all("text")][:1] == ["pp (t/s, higher is better)"]
        assert len(trend.find_all("rect")) == 6  # pp, tg and TTFT of two commits
        assert len(evidence.rows()) == 2 and evidence.rows()[0][0] == second[:12]
        assert len(evidence.find_all("figure")) == 3  # the trend, and bench.chart's chart of each file

        eugr_doc = parse(await dump_dom(f"{base}/lanes/{EUGR}"))
        status = section(eugr_doc, "status").text
        assert "suspended" in status and f"runs {first[:12]}" in status
        assert section(eugr_doc, "history").rows()[0][0] == second[:12]

        # -- screenshots: a phone and a desktop -----------------------------------------------
        shots = tmp_path / "screenshots"
        shots.mkdir()
        await screenshot(base + "/", shots / "overview-phone.png", 390, 2400)
        await screenshot(base + "/", shots / "overview-desktop.png", 1280, 4000)
        await screenshot(f"{base}/lanes/{PRODUCTION}", shots / "production-desktop.png", 1280, 2400)

        # -- the bearer token (httpx: a browser takes none on its command line) ---------------
        token_file = d.dir / "dashboard-token"
        token_file.write_text(TOKEN + "\n")
        assert await d.stop() == 0
        setting = f'[http]\ndashboard_token_file = "{token_file}"\n'
        d.config.write_text(d.config.read_text().replace("[http]\n", setting))
        await d.start()
        await wait_for_status(base)
        bare = await get(base + "/")
        assert bare.status_code == 401 and bare.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in bare.text
        assert (await get(base + "/", "wrong-token")).status_code == 401
        good = await get(f"{base}/lanes/{PRODUCTION}", TOKEN)
        assert good.status_code == 200 and "History" in good.text
        assert TOKEN not in good.text  # the token is a credential: redacted like the others
        assert (await get(base + "/healthz")).status_code in (200, 503)  # the probe endpoint asks for no token
        assert await d.stop() == 0


async def wait_for_status(base: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if (await get(base + "/status")).status_code == 200:
                return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{base}/status not answering within {timeout} s")


async def wait_for_page(url: str, ok: Callable[[str], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = (await get(url)).text
        if ok(text):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what} not seen within {timeout} s: {text[:2000]}")
