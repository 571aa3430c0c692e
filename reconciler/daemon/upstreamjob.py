"""The daemon's upstream job: poll every source, open proposals for tracked lanes, export the gap.

Runs under apscheduler like fetch and resync, only when `[upstream] enabled`;
it reads the sources and tracks from the newest commit the daemon decided on.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.metrics import Metrics
from reconciler.source.mirror import Mirror
from reconciler.spec.load import DesiredState
from reconciler.upstream import PollSettings, ProposalSettings, UpstreamStore, gap_rows, poll_all, propose_all
from reconciler.upstream.proposals import TrialFn

log = structlog.get_logger("lanes.upstream")


async def upstream_job(
    config: DaemonConfig,
    desired: DesiredState | None,
    mirror: Mirror,
    metrics: Metrics,
    trial: TrialFn | None = None,
) -> None:
    if desired is None:
        return
    poll = PollSettings(
        data_dir=Path(config.repo.mirror_dir).parent / "upstream", credentials_dir=config.daemon.secrets_dir
    )
    with UpstreamStore(config.daemon.db) as store:
        results = await poll_all(desired.upstreams, store, poll)
        for r in results:
            log.info(
                "upstream.polled", source=r.source, status=r.status, new=list(r.new), requests=r.requests, error=r.error
            )
        tracked = {lane.track.source for lane in desired.lanes.values() if lane.track is not None}
        if any(r.new and r.source in tracked for r in results):
            settings = ProposalSettings(
                base=config.repo.branch,
                state_dir=config.repo.state_dir,
                policies_dir=config.repo.policies_dir,
                poll=poll,
            )
            for outcome in await propose_all(mirror.repo, store, settings, trial=trial):
                log.info("upstream.proposal", outcome=str(outcome))
        gaps = {row.lane: (row.releases_behind or 0, float(row.days_behind or 0)) for row in gap_rows(desired, store)}
    metrics.set_upstream_gaps(gaps)
