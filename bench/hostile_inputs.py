"""The daemon's RSS and `/healthz` latency while it reads hostile input (issue 24): an alias bomb in a
pushed lane file read by the dashboard's lane page, and a 100 MB upstream answer.

    .venv/bin/python bench/hostile_inputs.py [--levels 5,6,8] [--before-levels 6] [--answer-mb 100]
        [--before-rev f06bd75] [--json]

Each case runs in a child process holding the daemon's own HTTP server (`reconciler.daemon.http`,
its default limits) with `/healthz` and one route doing what the daemon does for that input:

- `bomb`: `GET /lanes/x` walks the lane's history in a thread under a lock, as `daemon/dashroute.py`
  does (`reconciler.dashboard.gather.lane_git`, the page rendered with `render_lane`), on a repository
  whose head adds nine-fold aliases `--levels` deep to the lane file. `before` is the history module at
  `--before-rev` (before issue 24: its own pure-Python loader without caps), at `--before-levels`
  only (eight levels were killed at 40 s and 1.6 GB). Five levels (59,049 nodes) are under the
  loader's 200,000-node cap and parse alike before and after; six (531,441) are over it.
- `answer`: `POST /poll` polls two GitHub-releases sources through `reconciler.upstream.poll.poll_all`:
  one answers `--answer-mb` MB of JSON, the other answers well.

Meanwhile a client asks `GET /healthz` every 0.2 s (new connection, 5 s timeout) and the child's RSS is
read from /proc. Printed per case: RSS before and at peak, how many /healthz answered 200, their median
and worst latency, and what the route answered. Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.flood import proc_figures  # noqa: E402

CHILD = r"""
import asyncio, sys, threading, json
sys.path.insert(0, {root!r})
{before}
import pygit2
from reconciler.daemon.http import HttpServer, Response
from reconciler.upstream.base import PollSettings
from reconciler.upstream.poll import poll_all
from reconciler.upstream.store import UpstreamStore
from reconciler.spec.upstream import GitHubReleases

lock = threading.Lock()

async def pages(request):
    if request.path != "/lanes/x":
        return Response(404, b"no\n")
    repo = pygit2.Repository({repo!r})
    head = str(repo.head.target)

    def read():
        with lock:
            changes = lane_history(repo, "x", rev=head, limit=50)
        return changes

    changes = await asyncio.to_thread(read)
    text = repr([(c.commit, [(f.path, f.error, [(x.field, x.new) for x in f.fields]) for f in c.files])
                 for c in changes])
    return Response(200, f"{{len(text)}} bytes\n".encode())

async def webhook(headers, body):
    sources = [GitHubReleases(kind="github-releases", name=n, repo=f"{{n}}/r", api_url={api!r})
               for n in ("huge", "good")]
    with UpstreamStore({db!r}) as store:
        results = await poll_all(sources, store, PollSettings())
    return 202, json.dumps([[r.source, r.status, (r.error or "")[:80]] for r in results])

async def main():
    server = HttpServer("127.0.0.1:{{port}}", health=lambda: (True, ""), webhook=webhook, pages=pages)
    await server.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

AFTER_IMPORT = "from reconciler.source.history import lane_history"
BEFORE_IMPORT = """
import importlib.util
spec = importlib.util.spec_from_file_location("history_before", {path!r})
module = importlib.util.module_from_spec(spec); sys.modules["history_before"] = module
spec.loader.exec_module(module)
lane_history = module.lane_history
"""


@dataclass
class Figures:
    case: str
    rss_before_mb: float = 0.0
    rss_peak_mb: float = 0.0
    healthz_ok: int = 0
    healthz_asked: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    answer: str = ""
    seconds: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bomb_repo(folder: Path, levels: int) -> Path:
    repo = pygit2_init(folder)
    lane = b"engine: vllm\nimage: x@sha256:" + b"0" * 64 + b"\nmodel: m\nhosts: [dgx1]\n"
    commit(repo, {"state/lanes/x.yaml": lane}, "lane")
    lines = ["bomb0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"bomb{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    commit(repo, {"state/lanes/x.yaml": lane + ("\n".join(lines) + "\n").encode()}, "bomb")
    return folder


def pygit2_init(folder: Path):  # type: ignore[no-untyped-def]
    import pygit2

    return pygit2.init_repository(str(folder), bare=True, initial_head="main")


def commit(repo, files: dict[str, bytes], message: str) -> None:  # type: ignore[no-untyped-def]
    import pygit2

    index = pygit2.Index()
    for path, data in files.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    sig = pygit2.Signature("bench", "bench@example.org")
    parents = [] if repo.head_is_unborn else [repo.head.target]
    repo.create_commit("refs/heads/main", sig, sig, message, index.write_tree(repo), parents)


class Upstream(threading.Thread):
    """GitHub's releases API on loopback: `huge/r` answers `mb` MB of JSON, `good/r` one release."""

    def __init__(self, mb: int) -> None:
        super().__init__(daemon=True)
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        body_good = json.dumps([{"tag_name": "v1.0.0", "draft": False, "published_at": "2026-10-19T08:00:00Z"}])
        size = mb << 20

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if self.path.startswith("/repos/huge/"):
                    self.send_header("Content-Length", str(size + 2))
                    self.end_headers()
                    self.wfile.write(b"[")
                    chunk = b" " * (1 << 20)
                    for _ in range(mb):
                        try:
                            self.wfile.write(chunk)
                        except OSError:
                            return
                    self.wfile.write(b"]")
                else:
                    data = body_good.encode()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def run(self) -> None:
        self.httpd.serve_forever(poll_interval=0.05)


def run_case(case: str, child: str, request: tuple[str, str]) -> Figures:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", child.replace("{port}", str(port))], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()
    figures = Figures(case)
    time.sleep(0.5)
    figures.rss_before_mb = proc_figures(proc.pid)[0] / 1e6
    done = threading.Event()

    def monitor() -> None:
        while not done.is_set():
            figures.rss_peak_mb = max(figures.rss_peak_mb, proc_figures(proc.pid)[0] / 1e6)
            t0 = time.monotonic()
            figures.healthz_asked += 1
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    figures.healthz_ok += 1
                    figures.latencies_ms.append((time.monotonic() - t0) * 1000)
            except httpx.HTTPError:
                pass
            done.wait(0.2)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    method, path = request
    try:
        answer = httpx.request(method, f"http://127.0.0.1:{port}{path}", timeout=120)
        figures.answer = f"{answer.status_code} {answer.text.strip()[:160]}"
    except httpx.HTTPError as exc:
        figures.answer = f"{type(exc).__name__}"
    figures.seconds = time.monotonic() - t0
    time.sleep(1.0)
    done.set()
    watcher.join()
    proc.kill()
    proc.wait()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="5,6,8")
    parser.add_argument("--before-levels", type=int, default=6)
    parser.add_argument("--answer-mb", type=int, default=100)
    parser.add_argument("--before-rev", default="f06bd75")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: list[Figures] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        before = base / "history_before.py"
        before.write_bytes(
            subprocess.run(
                ["git", "show", f"{args.before_rev}:reconciler/source/history.py"],
                cwd=ROOT,
                check=True,
                capture_output=True,
            ).stdout
        )
        upstream = Upstream(args.answer_mb)
        upstream.start()
        levels = [int(n) for n in args.levels.split(",")]
        for n in levels:
            repo = bomb_repo(base / f"bomb{n}.git", n)
            fill = {"root": str(ROOT), "repo": str(repo), "api": upstream.url, "db": str(base / f"u{n}.db")}
            child = CHILD.format(before=AFTER_IMPORT, **fill)
            results.append(run_case(f"bomb, {n} levels (after)", child, ("GET", "/lanes/x")))
        repo = bomb_repo(base / "before.git", args.before_levels)
        fill = {"root": str(ROOT), "repo": str(repo), "api": upstream.url, "db": str(base / "b.db")}
        child = CHILD.format(before=BEFORE_IMPORT.format(path=str(before)), **fill)
        case = f"bomb, {args.before_levels} levels (before, {args.before_rev})"
        results.append(run_case(case, child, ("GET", "/lanes/x")))
        fill = {"root": str(ROOT), "repo": str(repo), "api": upstream.url, "db": str(base / "a.db")}
        child = CHILD.format(before=AFTER_IMPORT, **fill)
        results.append(run_case(f"{args.answer_mb} MB upstream answer (after)", child, ("POST", "/webhook")))
        upstream.httpd.shutdown()
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
        return
    print("| case | RSS before → peak | /healthz 200 | median / worst | request took | answer |")
    print("|---|---:|---:|---:|---:|---|")
    for r in results:
        lat = r.latencies_ms or [0.0]
        print(
            f"| {r.case} | {r.rss_before_mb:.1f} → {r.rss_peak_mb:.1f} MB | {r.healthz_ok} / {r.healthz_asked} | "
            f"{statistics.median(lat):.0f} ms / {max(lat):.0f} ms | {r.seconds:.1f} s | {r.answer} |"
        )


if __name__ == "__main__":
    main()
