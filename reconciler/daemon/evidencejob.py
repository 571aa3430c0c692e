"""Benchmark lanes a commit changed, once healthy, and commit the evidence to the state repo.

Runs inside the reconcile cycle, after the applies, so a benchmark never
overlaps a change to the same hosts; the evidence commit (own identity,
trailers `Lane:`, `Evidence-For:`, `pp:`, `tg:`) moves the branch, which the
daemon then sees as a commit that changes no lane. With SSH-signed commits
required (ssh or gpg), the daemon signs it with its own SSH key
(`bench.signing_key`, default `ssh.key`, declared as `lanes-evidence` in the
allowed signers or in `repo.evidence_signers`) and builds it only on the commit it
verified and decided (or its own evidence commits on it): see
`reconciler.source.evidence` for why evidence stays on the watched branch.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pygit2
import structlog

from reconciler.bench import benchmark_lane, chart, evidence
from reconciler.daemon.config import DaemonConfig
from reconciler.errors import LanesError
from reconciler.execute.cycle import CycleResult, targets_for
from reconciler.notifications import hub as notifications
from reconciler.source.evidence import commit_evidence
from reconciler.source.mirror import Mirror
from reconciler.spec.load import DesiredState
from reconciler.store.journal import Store
from reconciler.store.lanewriter import note_evidence

log = structlog.get_logger("lanes.bench")


def baseline_evidence(mirror: Mirror, lane: str, at: str | None = None) -> dict[str, Any] | None:
    """The lane's latest evidence at commit `at` (a verified one), else at the fetched head."""
    repo = mirror.repo
    head = at or mirror.head()
    if head is None:
        return None
    tree = repo[head].peel(pygit2.Tree)
    folder = f"evidence/{lane}"
    try:
        entry = tree[folder]
    except KeyError:
        return None
    subtree = repo[entry.id]
    if not isinstance(subtree, pygit2.Tree):
        return None
    names = [f"{folder}/{e.name}" for e in subtree if (e.name or "").endswith(".json")]
    path = evidence.latest(names, lane)
    if path is None:
        return None
    blob = repo[tree[path].id]
    return evidence.loads(blob.data, source=path) if isinstance(blob, pygit2.Blob) else None


def evidence_message(ev: dict[str, Any], commit: str) -> str:
    head = evidence.headline(ev)
    summary = ", ".join(head.values()) or "no figures"
    flag = " (regression)" if ev.get("regression") else ""
    trailer_lines = "\n".join(f"{k}: {v}" for k, v in evidence.trailers(ev))
    return (
        f"evidence: {ev.get('lane')}: {summary}{flag}\n\n"
        f"Measured by lanes once the lane was healthy after {commit[:12]}.\n\n{trailer_lines}\n"
    )


async def measure_and_commit(
    config: DaemonConfig,
    mirror: Mirror,
    desired: DesiredState,
    lane: str,
    *,
    url: str,
    baseline: dict[str, Any] | None,
    commit: str,
    branch: str,
    parents: set[str] | None,
    local_worktree: Path | None = None,
) -> tuple[dict[str, Any], str]:
    """Benchmark `lane` at `url` against `baseline`, commit the evidence and its chart on `branch` for `commit`:
    (the evidence, the evidence commit). With signed commits on, signed with the evidence key and built only on
    `parents` when given (the watched branch, a trial branch); None builds on the branch's head."""
    ev = await benchmark_lane(desired, lane, url=url, baseline=baseline)
    path = evidence.evidence_path(ev)
    files = {
        path: evidence.dumps(ev).encode(),
        path.removesuffix(".json") + ".svg": chart.render_svg(ev, baseline).encode(),
    }
    # Signed in either mode: with gpg, `repo.evidence_signers` declares this SSH key for evidence alone.
    signing = bool(config.repo.require_signed_commits)
    sha = await asyncio.to_thread(
        commit_evidence,
        mirror,
        files,
        evidence_message(ev, commit),
        branch=branch,
        local_worktree=local_worktree,
        signing_key=config.evidence_key() if signing else None,
        parents=parents if signing else None,
    )
    return ev, sha


async def benchmark_changed(
    config: DaemonConfig, desired: DesiredState, result: CycleResult, mirror: Mirror, store: Store
) -> list[str]:
    """Evidence commits made for the lanes this cycle applied (none when benchmarks are off)."""
    if not config.bench.enabled:
        return []
    targets = targets_for(desired, config.overrides())
    local = Path(config.repo.url) if config.repo.is_local and (Path(config.repo.url) / ".git").exists() else None
    made: list[str] = []
    for r in result.results:
        lane = desired.lanes.get(r.lane)
        if r.result != "applied" or lane is None or not lane.running:
            continue
        url = f"http://{targets[lane.hosts[0]].address}:{lane.port}"
        try:
            baseline = baseline_evidence(mirror, lane.name, at=desired.commit)
            ev, sha = await measure_and_commit(
                config, mirror, desired, lane.name, url=url, baseline=baseline, commit=desired.commit,
                branch=config.repo.branch, parents={desired.commit, *made}, local_worktree=local,
            )  # fmt: skip
        except (LanesError, OSError) as exc:
            log.warning("evidence.failed", lane=lane.name, error=str(exc))
            continue
        log.info("evidence.committed", lane=lane.name, commit=sha[:12], regression=bool(ev.get("regression")))
        notifications.on_regression(lane.name, desired.commit, sha, ev, desired)
        note_evidence(
            store,
            lane.name,
            {
                **evidence.headline(ev),
                "file": evidence.evidence_path(ev),
                "evidence_commit": sha,
                "for": desired.commit,
                "regression": bool(ev.get("regression")),
            },
        )
        made.append(sha)
    return made
