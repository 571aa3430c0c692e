"""How far a staging got, where people look: the lane's record (at most once a second, and the last figure of
each host), `lanes status`'s text, the daemon's metrics, and a line per reading in the progress stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.daemon.metrics import Metrics
from reconciler.execute.results import ProgressEvent
from reconciler.execute.stagestep import StageRecorder
from reconciler.execute.stagetypes import StageProgress
from reconciler.store.journal import Store
from reconciler.store.status import staging_text, status_rows

pytestmark = pytest.mark.timeout(30)
GIB = 1 << 30


def test_progress_reaches_the_record_status_text_metrics_and_events(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    events: list[ProgressEvent] = []
    store.update_lane("prod", desired="running", health="healthy")
    rec = StageRecorder(store, "prod", "m31", events.append)
    rec(StageProgress("prod", "dgx2", 1 * GIB, 4 * GIB, 500e6, 6.4))
    rec(StageProgress("prod", "dgx3", 2 * GIB, 4 * GIB, 250e6, 8.0))  # within the second: not written yet
    staging = store.lane("prod").staging  # type: ignore[union-attr]
    assert staging == {"model": "m31", "hosts": {"dgx2": {"done": GIB, "total": 4 * GIB, "rate_bps": 500_000_000,
                                                          "eta_s": 6.4, "phase": "copy"}}}  # fmt: skip
    rec(StageProgress("prod", "dgx3", 4 * GIB, 4 * GIB, 250e6, 0.0))  # a host done: always written
    row = next(r for r in status_rows(store, None) if r["name"] == "prod")
    assert set(row["staging"]["hosts"]) == {"dgx2", "dgx3"}
    text = staging_text(row["staging"])
    assert text == ("staging model m31: dgx2 1.0/4.0 GiB at 500 MB/s, 6 s left; dgx3 4.0/4.0 GiB at 250 MB/s, 0 s left")
    metrics = Metrics()
    metrics.update_from_status([row])
    body = metrics.render()[0].decode()
    assert 'lanes_staging_bytes_done{host="dgx3",lane="prod"} 4.294967296e+09' in body
    assert 'lanes_staging_bytes_total{host="dgx2",lane="prod"} 4.294967296e+09' in body
    assert events[0].detail == "dgx2: 1.00 of 4.00 GiB, 500 MB/s, 6 s left"
    rec.done(None)
    assert store.lane("prod").staging is None  # type: ignore[union-attr]
    metrics.update_from_status(status_rows(store, None))
    assert "lanes_staging_bytes_done{" not in metrics.render()[0].decode()
    store.close()
