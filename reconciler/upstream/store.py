"""Everything the upstream watch has seen, in sqlite: releases, poll state, git heads, proposals.

The watch must survive restarts without re-spending quota or re-opening
proposals: the ETag and the rate-limit deadline of every source, each
release with when it was first seen, each git head with the subjects that
came with it, and each proposal (lane, version) live here. The daemon hands
in the same sqlite file as its journal; every table is prefixed `upstream_`
so the two never collide. No credential is ever written here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reconciler.store.sqlite import open_db

RELEASES = "upstream_releases"
POLLS = "upstream_polls"
HEADS = "upstream_heads"
PROPOSALS = "upstream_proposals"


@dataclass(frozen=True)
class ReleaseRecord:
    """One release (GitHub) or tag (OCI) of a source. `version` is PEP 440 or None when the tag is not one."""

    source: str
    tag: str
    version: str | None
    variant: str = ""
    published: str | None = None
    """ISO 8601 (UTC) when the upstream says; OCI tags carry a date only when the tag names one."""
    digest: str | None = None
    url: str | None = None
    notes_url: str | None = None
    prerelease: bool = False
    first_seen: float = 0.0
    platforms: tuple[str, ...] | None = None
    """`os/arch[/variant]` the release's image offers (see `platforms`); None until read."""
    platforms_image: str | None = None
    """The pinned image (`repo@sha256:...`) the platforms were read from: for a GitHub release, the
    image a lane's track template made of it; a platform list is only valid for this digest."""


ADDED_RELEASE_COLUMNS: dict[str, type] = {"platforms": str, "platforms_image": str}
"""Columns later releases added to upstream_releases; a store written before them gets them on open."""


@dataclass(frozen=True)
class PollState:
    source: str
    etag: str | None = None
    last_poll: float | None = None
    next_allowed: float | None = None
    failures: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class HeadRecord:
    """A new head of a watched branch and the commits (newest first) since the head before it."""

    source: str
    branch: str
    sha: str
    committed: float
    commits: tuple[tuple[str, str], ...]
    """(sha, subject) pairs, newest first; the head itself is the first."""
    first_seen: float


@dataclass(frozen=True)
class ProposalRecord:
    lane: str
    version: str
    branch: str
    state: str
    """open, merged (the lane reached the version), closed (its branch went away)."""
    commit: str
    image: str
    pr_url: str | None = None
    denied: bool = False
    denial: tuple[str, ...] = ()
    created: float = 0.0
    upstream: str = ""
    """`<source> <tag>`, as in the commit's Upstream: trailer."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Room for what later steps attach (trial hosts, benchmark evidence); nothing writes it yet."""


class UpstreamStore:
    """sqlite-utils over one file; shared with the journal, tables of its own."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = open_db(self.path)
        self._migrate()

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> UpstreamStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _migrate(self) -> None:
        tables = set(self.db.table_names())
        if RELEASES not in tables:
            self.db.table(RELEASES).create(
                {
                    "source": str,
                    "tag": str,
                    "version": str,
                    "variant": str,
                    "published": str,
                    "digest": str,
                    "url": str,
                    "notes_url": str,
                    "prerelease": int,
                    "first_seen": float,
                    **ADDED_RELEASE_COLUMNS,
                },
                pk=("source", "tag"),
            )
        # Columns are only ever added (as the journal does, store/schema.py): an older lanes still reads this.
        have = self.db.table(RELEASES).columns_dict
        for column, kind in ADDED_RELEASE_COLUMNS.items():
            if column not in have:
                self.db.table(RELEASES).add_column(column, kind)
        if POLLS not in tables:
            self.db.table(POLLS).create(
                {
                    "source": str,
                    "etag": str,
                    "last_poll": float,
                    "next_allowed": float,
                    "failures": int,
                    "last_error": str,
                },
                pk="source",
            )
        if HEADS not in tables:
            self.db.table(HEADS).create(
                {
                    "source": str,
                    "branch": str,
                    "sha": str,
                    "committed": float,
                    "subjects": str,
                    "first_seen": float,
                },
                pk=("source", "sha"),
            )
        if PROPOSALS not in tables:
            self.db.table(PROPOSALS).create(
                {
                    "lane": str,
                    "version": str,
                    "branch": str,
                    "state": str,
                    "commit": str,
                    "image": str,
                    "pr_url": str,
                    "denied": int,
                    "denial": str,
                    "created": float,
                    "upstream": str,
                    "extra": str,
                },
                pk=("lane", "version"),
            )

    # releases

    def record_release(self, release: ReleaseRecord) -> bool:
        """Insert or refresh a release; True when it was not seen before (first_seen is kept)."""
        table = self.db.table(RELEASES)
        old = self.release(release.source, release.tag)
        row = asdict(release)
        row["prerelease"] = int(release.prerelease)
        row["first_seen"] = old.first_seen if old else (release.first_seen or time.time())
        if old is not None and release.digest is None:
            row["digest"] = old.digest
        if release.platforms is None and old is not None:
            row["platforms"], row["platforms_image"] = _platforms_json(old.platforms), old.platforms_image
        else:
            row["platforms"] = _platforms_json(release.platforms)
        table.upsert(row, pk=("source", "tag"))
        return old is None

    def record_platforms(self, source: str, tag: str, image: str, platforms: tuple[str, ...]) -> None:
        """What the image of a recorded release offers (read once per digest: a GET counts as a pull)."""
        self.db.table(RELEASES).update(
            (source, tag), {"platforms": _platforms_json(platforms), "platforms_image": image}
        )

    def release(self, source: str, tag: str) -> ReleaseRecord | None:
        rows = list(self.db.table(RELEASES).rows_where("source = ? and tag = ?", [source, tag]))
        return _release(rows[0]) if rows else None

    def releases(self, source: str) -> list[ReleaseRecord]:
        return [_release(r) for r in self.db.table(RELEASES).rows_where("source = ?", [source], order_by="tag")]

    def known_tags(self, source: str) -> set[str]:
        return {r["tag"] for r in self.db.query(f"select tag from {RELEASES} where source = ?", [source])}  # noqa: S608

    # poll state

    def poll_state(self, source: str) -> PollState:
        rows = list(self.db.table(POLLS).rows_where("source = ?", [source]))
        if not rows:
            return PollState(source)
        r = rows[0]
        return PollState(
            source=r["source"],
            etag=r["etag"],
            last_poll=r["last_poll"],
            next_allowed=r["next_allowed"],
            failures=r["failures"] or 0,
            last_error=r["last_error"],
        )

    def save_poll_state(self, state: PollState) -> None:
        self.db.table(POLLS).upsert(asdict(state), pk="source")

    # git heads

    def record_head(self, head: HeadRecord) -> None:
        row = {
            "source": head.source,
            "branch": head.branch,
            "sha": head.sha,
            "committed": head.committed,
            "subjects": json.dumps([{"sha": sha, "subject": subject} for sha, subject in head.commits]),
            "first_seen": head.first_seen or time.time(),
        }
        self.db.table(HEADS).upsert(row, pk=("source", "sha"))

    def heads(self, source: str) -> list[HeadRecord]:
        """Oldest first, by when each head was seen."""
        rows = self.db.table(HEADS).rows_where("source = ?", [source], order_by="first_seen, committed")
        return [_head(r) for r in rows]

    def last_head(self, source: str) -> HeadRecord | None:
        heads = self.heads(source)
        return heads[-1] if heads else None

    # proposals

    def record_proposal(self, proposal: ProposalRecord) -> None:
        row = asdict(proposal)
        row["denied"] = int(proposal.denied)
        row["denial"] = json.dumps(list(proposal.denial))
        row["extra"] = json.dumps(proposal.extra, sort_keys=True)
        row["created"] = proposal.created or time.time()
        self.db.table(PROPOSALS).upsert(row, pk=("lane", "version"))

    def proposal(self, lane: str, version: str) -> ProposalRecord | None:
        rows = list(self.db.table(PROPOSALS).rows_where("lane = ? and version = ?", [lane, version]))
        return _proposal(rows[0]) if rows else None

    def proposals(self, lane: str | None = None, state: str | None = None) -> list[ProposalRecord]:
        where, args = [], []
        if lane is not None:
            where.append("lane = ?")
            args.append(lane)
        if state is not None:
            where.append("state = ?")
            args.append(state)
        rows = self.db.table(PROPOSALS).rows_where(" and ".join(where) or None, args, order_by="created")
        return [_proposal(r) for r in rows]

    def set_proposal_state(self, lane: str, version: str, state: str) -> None:
        self.db.table(PROPOSALS).update((lane, version), {"state": state})


def _release(r: dict[str, Any]) -> ReleaseRecord:
    return ReleaseRecord(
        source=r["source"],
        tag=r["tag"],
        version=r["version"],
        variant=r["variant"] or "",
        published=r["published"],
        digest=r["digest"],
        url=r["url"],
        notes_url=r["notes_url"],
        prerelease=bool(r["prerelease"]),
        first_seen=r["first_seen"] or 0.0,
        platforms=tuple(json.loads(r["platforms"])) if r.get("platforms") is not None else None,
        platforms_image=r.get("platforms_image"),
    )


def _platforms_json(platforms: tuple[str, ...] | None) -> str | None:
    return None if platforms is None else json.dumps(list(platforms))


def _head(r: dict[str, Any]) -> HeadRecord:
    commits = tuple((c["sha"], c["subject"]) for c in json.loads(r["subjects"] or "[]"))
    return HeadRecord(
        source=r["source"],
        branch=r["branch"],
        sha=r["sha"],
        committed=r["committed"] or 0.0,
        commits=commits,
        first_seen=r["first_seen"] or 0.0,
    )


def _proposal(r: dict[str, Any]) -> ProposalRecord:
    return ProposalRecord(
        lane=r["lane"],
        version=r["version"],
        branch=r["branch"],
        state=r["state"],
        commit=r["commit"],
        image=r["image"],
        pr_url=r["pr_url"],
        denied=bool(r["denied"]),
        denial=tuple(json.loads(r["denial"] or "[]")),
        created=r["created"] or 0.0,
        upstream=r["upstream"] or "",
        extra=json.loads(r["extra"] or "{}"),
    )
