"""upstream: watch engine releases, registry tags and branch heads; the gap table; proposal branches.

Effects layer: httpx for GitHub and OCI registries, pygit2 for git heads and
proposal branches, sqlite-utils for what was seen. Entry points:

- `poll_source(source, store, settings)` / `poll_all(upstreams, store, settings)`:
  one apscheduler job per source (every `interval_s`), or all at once.
- `gap_rows(desired, store)`: the "Where we are" table (`lanes upstream`).
- `propose_all(repo, store, settings)`: proposal branches and pull requests
  for lanes with `track:` (`lanes propose`).

The names are imported from their modules on first use, not with the package: what reads only the
mirrors (`ancestry.py`, for `lanes check`) must not pay for the HTTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reconciler.lazynames import names_from

if TYPE_CHECKING:
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

_HOMES = {
    "Clock": "base",
    "PollResult": "base",
    "PollSettings": "base",
    "ForgeSettings": "forge",
    "GapRow": "gap",
    "gap_rows": "gap",
    "make_client": "poll",
    "poll_all": "poll",
    "poll_source": "poll",
    "ProposalOutcome": "proposals",
    "ProposalSettings": "proposals",
    "propose_all": "proposals",
    "UpstreamStore": "store",
}


__getattr__ = names_from(__name__, {name: f"{__name__}.{home}" for name, home in _HOMES.items()})
