"""What Apprise costs the daemon: import time, memory, and the time of one message to a local receiver.

Each figure comes from a fresh interpreter (a child process) so nothing is
already imported: the daemon's own modules alone (`reconciler.daemon.service`),
then the same plus `apprise` and one message sent through
`reconciler.notifications.receivers.send` to a JSON webhook on 127.0.0.1, and
for comparison the same messages posted with one httpx client (already a dependency of lanes)
to the same receiver. Memory is the child's peak RSS (ru_maxrss).

    .venv/bin/python bench/notifications.py [--runs 5] [--messages 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
import reconciler.daemon.service
t_daemon = time.perf_counter() - t0
out = {{"daemon_import_s": t_daemon}}
mode = {mode!r}
if mode != "daemon":
    from tests.support.receivers import Receivers
    receivers = Receivers("unused")
    url = "json://" + receivers.hostport + "/hook/bench"
    if mode == "apprise":
        t0 = time.perf_counter()
        import apprise
        out["apprise_import_s"] = time.perf_counter() - t0
        from reconciler.notifications.receivers import send
        from reconciler.notifications.settings import ReceiverSettings
        settings = ReceiverSettings(url=url)
        t0 = time.perf_counter()
        send(settings, "title", "body", "warning", 5.0)
        out["first_send_s"] = time.perf_counter() - t0
        times = []
        for _ in range({messages}):
            t0 = time.perf_counter()
            send(settings, "title", "body", "warning", 5.0)
            times.append(time.perf_counter() - t0)
    else:
        import httpx
        post = "http://" + receivers.hostport + "/hook/bench"
        t0 = time.perf_counter()
        client = httpx.Client(timeout=5.0)
        client.post(post, json={{"title": "title", "message": "body"}})
        out["first_send_s"] = time.perf_counter() - t0
        times = []
        for _ in range({messages}):
            t0 = time.perf_counter()
            client.post(post, json={{"title": "title", "message": "body"}})
            times.append(time.perf_counter() - t0)
    times.sort()
    out["send_median_s"] = times[len(times) // 2]
    out["received"] = len(receivers.got)
    receivers.close()
out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def child(mode: str, messages: int) -> dict[str, float]:
    code = CHILD.format(root=str(ROOT), mode=mode, messages=messages)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--messages", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {}
    for mode in ("daemon", "apprise", "httpx"):
        runs = [child(mode, args.messages) for _ in range(args.runs)]
        rows[mode] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    base = rows["daemon"]["max_rss_mb"]
    print(f"{'':10} {'RSS MB':>8} {'+RSS MB':>8} {'import ms':>10} {'1st send ms':>12} {'send ms (median)':>17}")
    for mode, r in rows.items():
        imp = r.get("apprise_import_s", r["daemon_import_s"] if mode == "daemon" else 0.0) * 1000
        first = r.get("first_send_s", 0.0) * 1000
        median = r.get("send_median_s", 0.0) * 1000
        extra = r["max_rss_mb"] - base
        print(f"{mode:10} {r['max_rss_mb']:8.1f} {extra:8.1f} {imp:10.1f} {first:12.1f} {median:17.2f}")


if __name__ == "__main__":
    main()
