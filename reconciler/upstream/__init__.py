"""upstream: watch engine releases, registry tags and branch heads; the gap table; proposal branches.

Effects layer: httpx for GitHub and OCI registries, pygit2 for git heads and
proposal branches, sqlite-utils for what was seen. Entry points:

- `poll_source(source, store, settings)` / `poll_all(upstreams, store, settings)`:
  one apscheduler job per source (every `interval_s`), or all at once.
- `gap_rows(desired, store)`: the "Where we are" table (`lanes upstream`).
- `propose_all(repo, store, settings)`: proposal branches and pull requests
  for lanes with `track:` (`lanes propose`).
"""

from reconciler.upstream.base import Clock, PollResult, PollSettings
from reconciler.upstream.forge import ForgeSettings
from reconciler.upstream.gap import GapRow, gap_rows
from reconciler.upstream.poll import make_client, poll_all, poll_source
from reconciler.upstream.proposals import ProposalOutcome, ProposalSettings, propose_all
from reconciler.upstream.store import UpstreamStore

__all__ = [
    "Clock",
    "ForgeSettings",
    "GapRow",
    "PollResult",
    "PollSettings",
    "ProposalOutcome",
    "ProposalSettings",
    "UpstreamStore",
    "gap_rows",
    "make_client",
    "poll_all",
    "poll_source",
    "propose_all",
]
