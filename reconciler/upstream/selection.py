"""Which release a tracking lane should be proposed, and what became of earlier proposals.

Kept apart from the git and forge work so the rules read in one place: the
newest release of the track's source that satisfies the track's specifier
(pre-releases only when the track allows them) and is newer than the lane's
build by the gap rule of `versions`; a proposal stops counting against
`max_open` once the lane reaches its version or image (merged) or its branch
is gone (closed).
"""

from __future__ import annotations

import string
from collections.abc import Callable

from packaging.version import Version

from reconciler.errors import InputError
from reconciler.spec.lane import Lane
from reconciler.upstream.store import ReleaseRecord, UpstreamStore
from reconciler.upstream.versions import Candidate, is_newer, parse_day, parse_engine_version, qualifies, says_nothing

TEMPLATE_FIELDS = frozenset({"version", "tag", "variant"})


def newest_qualifying(store: UpstreamStore, lane: Lane, path: str) -> ReleaseRecord | None:
    """The newest recorded release of the lane's track source that qualifies and is newer than the lane."""
    assert lane.track is not None
    built = parse_day(lane.image_built)
    best: tuple[Version, bool, ReleaseRecord] | None = None
    for record in store.releases(lane.track.source):
        if record.version is None or (record.prerelease and not lane.track.prereleases):
            continue
        version = Version(record.version)
        if not qualifies(version, lane.track.versions, lane.track.prereleases, file=path):
            continue
        if not is_newer(Candidate(record.tag, version, parse_day(record.published)), lane.engine_version, built):
            continue
        key = (version, not record.variant, record)  # a variant-less tag wins a tie
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def settle_open(store: UpstreamStore, lane: Lane, branch_exists: Callable[[str], bool]) -> None:
    """Open proposals the lane has caught up with are merged; those whose branch went away are closed."""
    current = parse_engine_version(lane.engine_version)
    for p in store.proposals(lane.name, "open"):
        reached = lane.image == p.image or (
            current is not None and not says_nothing(current) and current >= Version(p.version)
        )
        if reached:
            store.set_proposal_state(lane.name, p.version, "merged")
        elif not branch_exists(p.branch):
            store.set_proposal_state(lane.name, p.version, "closed")


def image_reference(template: str, release: ReleaseRecord, path: str) -> str:
    """The track's image template filled in: `{version}` (PEP 440), `{tag}` (as published), `{variant}`."""
    fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    if not fields <= TEMPLATE_FIELDS:
        unknown = ", ".join(sorted(fields - TEMPLATE_FIELDS))
        raise InputError(
            f"unknown placeholder(s) {unknown}; use {{version}}, {{tag}}, {{variant}}", file=path, field="track.image"
        )
    return template.format(version=release.version, tag=release.tag, variant=release.variant)
