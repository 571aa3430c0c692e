"""What `lanes plan` says beyond the steps: the fields that changed, the ranks that restart, the downtime.

A lane's containers carry the commit they were started at (the `lanes.commit` label), so the
change a redeploy carries out is the lane file (and its model file) diffed from that commit to
the wanted one: the same field diff `lanes history` shows (`max_num_seqs: 8 -> 6`), made by the
same function (`reconciler.source.history`). A commit the local repository does not have (a
clone behind the daemon's) is said so, and the plan still shows the spec hashes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygit2

from reconciler.errors import LanesError
from reconciler.execute.cycle import CycleResult
from reconciler.facts.labels import LABEL_COMMIT
from reconciler.plan.steps import LanePlan, StopContainers
from reconciler.source.history import FileChange, lane_changes_between
from reconciler.store.journal import Store
from reconciler.store.lanestate import last_start_s


@dataclass(frozen=True)
class LaneDiff:
    running: tuple[str, ...]
    """The commits this lane's containers were started at (usually one)."""
    files: tuple[FileChange, ...] = ()
    problem: str | None = None
    """Why there is no field diff (the running commit is not in this repository)."""
    restarts: tuple[str, ...] = ()
    """`rank N on HOST` for every running rank the plan stops."""
    last_ready_s: float | None = None
    """Seconds the lane's last start took to its first token: the downtime to expect."""

    def to_json(self) -> dict[str, Any]:
        return {
            "running_commits": list(self.running),
            "fields": [
                {"file": f.path, "field": c.field, "kind": c.kind, "old": c.old, "new": c.new}
                for f in self.files
                for c in f.fields
            ],
            "problem": self.problem,
            "restarts": list(self.restarts),
            "expected_downtime_s": self.last_ready_s,
        }


def _restarts(lp: LanePlan, result: CycleResult) -> tuple[str, ...]:
    stopped = {(c.host, c.name) for step in lp.steps if isinstance(step, StopContainers) for c in step.containers}
    out = []
    for host, container in result.observed.containers_of_lane(lp.lane):
        if (host, container.name) in stopped:
            out.append(f"rank {container.rank if container.rank is not None else '?'} on {host}")
    return tuple(out)


def _last_ready(store: Store, lane: str) -> float | None:
    return last_start_s(store.lane(lane))


def lane_diffs(
    repo: pygit2.Repository, result: CycleResult, store: Store, state_dir: str = "state"
) -> dict[str, LaneDiff]:
    """For every lane the plan changes: what its containers run, the field diff, the restarts, the downtime."""
    out: dict[str, LaneDiff] = {}
    for lp in result.plan.lanes:
        if not lp.changes:
            continue
        containers = result.observed.containers_of_lane(lp.lane)
        running = tuple(sorted({c.labels[LABEL_COMMIT] for _, c in containers if LABEL_COMMIT in c.labels}))
        files: tuple[FileChange, ...] = ()
        problem = None
        if lp.action not in {"stop", "verify"} and running and running[0] != result.commit:
            try:
                files = lane_changes_between(repo, lp.lane, running[0], result.commit, state_dir=state_dir)
            except LanesError:
                problem = f"commit {running[0][:12]} (what runs) is not in this repository: fetch it to see the fields"
        restarts = _restarts(lp, result)
        out[lp.lane] = LaneDiff(running, files, problem, restarts, _last_ready(store, lp.lane) if restarts else None)
    return out
