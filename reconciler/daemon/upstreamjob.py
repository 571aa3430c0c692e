"""The daemon's upstream job: poll every source, open proposals for tracked lanes, export the gap.

Runs under apscheduler like fetch and resync, only when `[upstream] enabled`;
it reads the sources and tracks from the last commit the daemon verified and
decided on, loaded through the decider's one door (`Gate.act_on`), and
proposals branch from that commit, never from the fetched head (which may be
an unsigned commit the decider refused). Given a bare desired state (no
gate), it polls and exports the gap but proposes nothing.
"""

from __future__ import annotations

import structlog

from reconciler.daemon.config import DaemonConfig
from reconciler.daemon.gate import Gate
from reconciler.daemon.metrics import Metrics
from reconciler.notifications import hub as notifications
from reconciler.source.mirror import Mirror
from reconciler.spec.load import DesiredState
from reconciler.upstream import ProposalSettings, UpstreamStore, gap_rows, poll_all, propose_all
from reconciler.upstream.proposals import TrialFn

log = structlog.get_logger("lanes.upstream")


async def upstream_job(
    config: DaemonConfig,
    source: DesiredState | Gate | None,
    mirror: Mirror,
    metrics: Metrics,
    trial: TrialFn | None = None,
) -> None:
    base: str | None = None
    if source is None or isinstance(source, DesiredState):
        desired = source
    else:
        base = source.trusted
        desired = source.act_on(base).desired if base is not None else None
    if desired is None:
        return
    poll = config.poll_settings()  # the declared tokens and their hosts; never the lane secrets
    with UpstreamStore(config.daemon.db) as store:
        results = await poll_all(desired.upstreams, store, poll)
        for r in results:
            log.info(
                "upstream.polled", source=r.source, status=r.status, new=list(r.new), requests=r.requests, error=r.error
            )
        tracked = {lane.track.source for lane in desired.lanes.values() if lane.track is not None}
        if base is not None and any(r.new and r.source in tracked for r in results):
            token = config.repo.credential_file  # an https remote's token: the URL carries none (issue 14)
            # Both tokens are read by name from one credentials folder (systemd's): a forge token elsewhere
            # is a second folder the proposals cannot read, so they open no pull request and say so.
            forge, forge_dir = config.forge.settings(), config.forge.token_dir()
            if forge is not None and token is not None and forge_dir is not None and forge_dir != token.parent:
                log.warning("upstream.forge_token_elsewhere", token=str(config.forge.token_file), push=str(token))
                forge = None
            credentials = token.parent if token else forge_dir
            settings = ProposalSettings(
                base=config.repo.branch,
                state_dir=config.repo.state_dir,
                policies_dir=config.repo.policies_dir,
                poll=poll.model_copy(update={"credentials_dir": credentials}) if credentials else poll,
                push_credential=token.name if token else None,
                forge=forge,
            )
            for outcome in await propose_all(mirror.repo, store, settings, trial=trial, base=base):
                log.info("upstream.proposal", outcome=str(outcome))
                notifications.on_proposal(outcome, base, desired)
        gaps = {row.lane: (row.releases_behind or 0, float(row.days_behind or 0)) for row in gap_rows(desired, store)}
    metrics.set_upstream_gaps(gaps)
