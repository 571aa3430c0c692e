"""The "Where we are" table: per lane, its engine build against the latest upstream and the gap.

This is the table the team kept by hand in its notes (production SGLang
about three weeks behind v0.5.22, the GLM fork six minor releases behind
vLLM 0.32.0, the eugr nightly essentially current), computed from what the
pollers recorded, so it is true on the day it is printed. The comparison
rules are in `versions`; this module joins lanes, sources and records.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import date

from packaging.version import Version

from reconciler.spec.lane import DIGEST_RE, Lane
from reconciler.spec.load import DesiredState
from reconciler.spec.upstream import GitHead, OCIRepository, UpstreamSource
from reconciler.upstream.platforms import SPARK_PLATFORM, describe, runs_on_spark
from reconciler.upstream.store import ReleaseRecord, UpstreamStore
from reconciler.upstream.versions import (
    Candidate,
    Gap,
    date_in_tag,
    dated_gap,
    head_gap,
    humanize_days,
    parse_day,
    parse_tag,
    release_gap,
)

NOTHING_YET = "nothing recorded yet (lanes upstream --refresh)"
CURRENT_DAYS = 7
"""No release behind and at most this many days of commits: "essentially current"."""


@dataclass(frozen=True)
class GapRow:
    lane: str
    engine: str
    engine_version: str
    image: str
    digest_short: str | None
    built: str | None
    upstream: str | None
    upstream_kind: str | None
    latest: str | None = None
    """The newest stable release's version, or the branch and short sha of its head."""
    latest_date: str | None = None
    rule: str = "unknown"
    """How newer was decided: version, build-date, commit, unknown, or none (no upstream declared)."""
    releases_behind: int | None = None
    minors_behind: int | None = None
    commits_behind: int | None = None
    days_behind: int | None = None
    between: tuple[str, ...] = field(default_factory=tuple)
    """Versions in between (oldest first); for a branch, the subjects of the commits behind (newest first)."""
    summary: str = ""
    no_arm64: tuple[str, ...] = ()
    """Releases shown (latest and in between) whose image was read and offers no linux/arm64 build,
    each as `<version>: <platforms>`: a Spark cannot pull them, so they are never proposed."""

    def to_json(self) -> dict[str, object]:
        return {
            "lane": self.lane,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "image": self.image,
            "digest_short": self.digest_short,
            "built": self.built,
            "upstream": self.upstream,
            "upstream_kind": self.upstream_kind,
            "latest": self.latest,
            "latest_date": self.latest_date,
            "rule": self.rule,
            "releases_behind": self.releases_behind,
            "minors_behind": self.minors_behind,
            "commits_behind": self.commits_behind,
            "days_behind": self.days_behind,
            "between": list(self.between),
            "summary": self.summary,
            "no_arm64": list(self.no_arm64),
        }


def digest_short(image: str) -> str | None:
    match = DIGEST_RE.search(image)
    return match.group(0)[len("@sha256:") : len("@sha256:") + 8] if match else None


def candidates(records: list[ReleaseRecord]) -> list[Candidate]:
    out = []
    for r in records:
        if r.version is None:
            continue
        out.append(Candidate(r.tag, Version(r.version), parse_day(r.published), r.prerelease, r.variant))
    return out


def gap_rows(desired: DesiredState, store: UpstreamStore) -> list[GapRow]:
    """One row per lane, in lane-name order."""
    sources = {s.name: s for s in desired.upstreams.sources}
    return [lane_row(lane, sources, store) for _, lane in sorted(desired.lanes.items())]


def lane_row(lane: Lane, sources: dict[str, UpstreamSource], store: UpstreamStore) -> GapRow:
    name = lane.upstream or (lane.track.source if lane.track else None)
    source = sources.get(name) if name else None
    built = parse_day(lane.image_built)
    base = GapRow(
        lane=lane.name,
        engine=lane.engine,
        engine_version=lane.engine_version,
        image=lane.image,
        digest_short=digest_short(lane.image),
        built=lane.image_built,
        upstream=name,
        upstream_kind=source.kind if source else None,
    )
    if source is None:
        return replace(base, rule="none", summary="no upstream declared")
    if isinstance(source, GitHead):
        return _head_row(base, lane, built, store, source)
    records = store.releases(source.name)
    if not records:
        return replace(base, summary=NOTHING_YET)
    found = candidates(records)
    dated_only = isinstance(source, OCIRepository) and not found
    if dated_only:
        dated = [(r.tag, d) for r in records if (d := date_in_tag(r.tag) or parse_day(r.published))]
        gap = dated_gap(built, dated)
    else:
        gap = release_gap(lane.engine_version, built, found)
    latest = gap.latest
    latest_name = (latest.tag if dated_only else _version_name(latest)) if latest else None
    shown = [*gap.behind, *([latest] if latest and latest not in gap.behind else [])]
    no_arm64 = _no_arm64(records, [(c.tag, c.tag if dated_only else _version_name(c)) for c in shown])
    return replace(
        base,
        latest=latest_name,
        latest_date=latest.published.isoformat() if latest and latest.published else None,
        rule=gap.rule,
        releases_behind=gap.releases_behind,
        minors_behind=None if dated_only else gap.minors_behind,
        commits_behind=None,
        days_behind=gap.days_behind,
        between=tuple(c.tag if dated_only else _version_name(c) for c in gap.behind),
        summary=_release_summary(gap, dated_only) + "".join(f"; {n}" for n in no_arm64),
        no_arm64=no_arm64,
    )


def _no_arm64(records: list[ReleaseRecord], shown: list[tuple[str, str]]) -> tuple[str, ...]:
    """`<name>: no linux/arm64 image (<platforms>)` for each shown release whose image was read without one."""
    by_tag = {r.tag: r for r in records}
    out = []
    for tag, name in shown:
        record = by_tag.get(tag)
        if record is not None and record.platforms is not None and not runs_on_spark(record.platforms):
            out.append(f"{name}: no {SPARK_PLATFORM} image ({describe(record.platforms)})")
    return tuple(out)


def _version_name(c: Candidate) -> str:
    parsed = parse_tag(c.tag)
    return str(parsed.version) if parsed else c.tag


def _release_summary(gap: Gap, dated_only: bool) -> str:
    if gap.rule == "unknown":
        return "unknown: the build has neither a comparable version nor a build date"
    count = gap.releases_behind or 0
    if count == 0:
        return "current"
    noun = "tag" if dated_only else "release"
    text = f"{count} {noun}{'s' if count != 1 else ''} behind"
    if not dated_only and gap.minors_behind and gap.minors_behind > 1:
        text += f" ({gap.minors_behind} minor)"
    text += f", {humanize_days(gap.days_behind)}"
    if gap.rule == "build-date":
        text += " (by build date)"
    return text


def _head_row(base: GapRow, lane: Lane, built: date | None, store: UpstreamStore, source: GitHead) -> GapRow:
    heads = store.heads(source.name)
    if not heads:
        return replace(base, summary=NOTHING_YET)
    gap = head_gap(lane.engine_version, built, [(h.sha, h.committed, h.commits) for h in heads])
    if gap.rule == "unknown":
        summary = "unknown: the build names no commit and has no build date"
    elif gap.commits_behind == 0:
        summary = "current"
    elif (gap.days_behind or 0) <= CURRENT_DAYS:
        count = f"{gap.commits_behind} commits, " if gap.commits_behind is not None else ""
        summary = f"essentially current ({count}{humanize_days(gap.days_behind)})"
    else:
        count = f"{gap.commits_behind} commits, " if gap.commits_behind is not None else ""
        summary = f"{count}{humanize_days(gap.days_behind)} behind {source.branch}"
    return replace(
        base,
        latest=f"{source.branch} {gap.head[:9]}" if gap.head else None,
        latest_date=gap.head_day.isoformat() if gap.head_day else None,
        rule=gap.rule,
        releases_behind=0 if gap.rule == "commit" else None,
        minors_behind=None,
        commits_behind=gap.commits_behind,
        days_behind=gap.days_behind,
        between=gap.subjects,
        summary=summary,
    )
