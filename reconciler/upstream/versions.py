"""Engine versions against upstream releases: parsing, ordering, qualifying, and the gap (pure).

Upstream tags are not PEP 440 (`v0.5.22`, `v0.5.22-cu130`, `nightly-20261015`)
and engine builds often are not releases (`0.0.0.dev1+gda64c5cbb` is SGLang
built from main, `0.26.1rc0+glm53.r39.vllm9e5d1793` a fork). The gap table
and the proposals both need one answer to "is this release newer than what
the lane runs, and by how much", so the rule lives here, without I/O:

- A tag is a PEP 440 version, optionally after a `v`, optionally followed by
  a `-variant` (`-cu130`, `-cu130-arm64`); the variant is kept apart.
- A lane's engine_version is compared as a version, the local segment
  (`+...`) included (a fork of 0.32.0 sorts after 0.32.0, as PEP 440 says).
- When the version says nothing (its release segment is all zeros: the
  `0.0.0` placeholder of a build from a source checkout), releases are
  compared by date instead: a release published after the lane's
  `image_built` date is newer. With neither, the gap is unknown.
- Days behind is the latest release's date minus `image_built`, never
  negative, and zero when no release is newer.
- For a git-head source, the commit named by the version's `g<hex>` local
  part is looked up among the recorded commits; days come from commit dates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from reconciler.errors import InputError
from reconciler.policy.ancestry import build_commit

_DATE_IN_TAG = re.compile(r"(?<!\d)(20\d{2})(\d{2})(\d{2})(?!\d)")

OCI_TAG = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}")
"""The tag grammar of the OCI distribution spec (spec.md, "Pulling manifests": a tag "MUST be at most 128
characters in length and MUST match the following regular expression: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`").

An upstream tag (a GitHub release's tag_name, an OCI registry's tag list) is someone else's string; it
becomes an image reference `repo:tag`, a branch `lanes/proposals/<lane>/<version>`, a commit trailer and
text in a pull request. One that does not match is never recorded (`valid_tag`), so none of those ever
sees a `/`, `..`, a space, a newline or a leading `-`."""


def valid_tag(tag: object) -> bool:
    """Whether `tag` is a string in the OCI tag grammar (`OCI_TAG`, matched whole)."""
    return isinstance(tag, str) and OCI_TAG.fullmatch(tag) is not None


GapRule = Literal["version", "build-date", "commit", "unknown"]


@dataclass(frozen=True)
class TagVersion:
    """An upstream tag split into its PEP 440 version and the build variant after it."""

    tag: str
    version: Version
    variant: str = ""

    @property
    def prerelease(self) -> bool:
        return self.version.is_prerelease


def parse_tag(tag: str) -> TagVersion | None:
    """`v0.5.22` -> 0.5.22; `v0.5.22-cu130` -> 0.5.22 + cu130; `v0.6.0-rc1-cu130` -> 0.6.0rc1 + cu130."""
    text = tag.strip()
    if not (text[:1].isdigit() or (text[:1] in ("v", "V") and text[1:2].isdigit())):
        return None  # `nightly-20261015`, `latest`: names, not versions
    parts = text.split("-")
    # The longest prefix that is a version wins, so `-rc1` stays part of it and `-cu130` does not.
    for cut in range(len(parts), 0, -1):
        head = "-".join(parts[:cut])
        try:
            version = Version(head)
        except InvalidVersion:
            continue
        return TagVersion(tag=tag, version=version, variant="-".join(parts[cut:]))
    return None


def parse_engine_version(text: str) -> Version | None:
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def says_nothing(version: Version | None) -> bool:
    """True for `0.0.0...` placeholders: the number carries no position relative to releases."""
    return version is None or not any(version.release)


def commit_of(version: Version | None) -> str | None:
    """The commit a build names in its local segment (`+g8244d1c44` -> `8244d1c44`), setuptools-scm style."""
    return None if version is None else build_commit(str(version))


def date_in_tag(tag: str) -> date | None:
    """`nightly-20261015` -> 2026-10-15, for OCI tags that carry no publish date of their own."""
    match = _DATE_IN_TAG.search(tag)
    if not match:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def parse_day(text: str | None) -> date | None:
    """An ISO date or timestamp (`2026-10-18`, `2026-10-18T12:00:00Z`) to its UTC day."""
    if not text:
        return None
    try:
        if len(text) == 10:
            return date.fromisoformat(text)
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.date()


def day_of(epoch: float) -> date:
    return datetime.fromtimestamp(epoch, UTC).date()


def specifier(text: str, *, file: str | None = None) -> SpecifierSet:
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise InputError(f"'{text}' is not a PEP 440 version specifier", file=file, field="track.versions") from None


def qualifies(version: Version, versions: str, prereleases: bool, *, file: str | None = None) -> bool:
    """Does a release satisfy a lane's track (specifier, and pre-releases only when allowed)?"""
    if version.is_prerelease and not prereleases:
        return False
    return specifier(versions, file=file).contains(version, prereleases=prereleases)


@dataclass(frozen=True)
class Candidate:
    """A release as the gap and the proposals see it."""

    tag: str
    version: Version
    published: date | None
    prerelease: bool = False
    variant: str = ""


def is_newer(candidate: Candidate, engine_version: str, image_built: date | None) -> bool | None:
    """Is the release newer than the lane's build? None when neither version nor date can tell."""
    current = parse_engine_version(engine_version)
    if current is not None and not says_nothing(current):
        return candidate.version > current
    if image_built is not None and candidate.published is not None:
        return candidate.published > image_built
    return None


@dataclass(frozen=True)
class Gap:
    rule: GapRule
    latest: Candidate | None
    behind: tuple[Candidate, ...]
    """Stable releases newer than the lane, oldest first, one per version."""
    days_behind: int | None

    @property
    def releases_behind(self) -> int | None:
        return None if self.rule == "unknown" else len(self.behind)

    @property
    def minors_behind(self) -> int | None:
        """Distinct major.minor series among the releases behind (the note's "six minor releases")."""
        if self.rule == "unknown":
            return None
        return len({c.version.release[:2] for c in self.behind})


def stable_by_version(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Stable releases, one per version (the earliest published of its variants), oldest version first."""
    chosen: dict[Version, Candidate] = {}
    for c in candidates:
        if c.prerelease or c.version.is_prerelease:
            continue
        known = chosen.get(c.version)
        if known is None or (c.published and (known.published is None or c.published < known.published)):
            chosen[c.version] = c
    return [chosen[v] for v in sorted(chosen)]


def release_gap(engine_version: str, image_built: date | None, candidates: Sequence[Candidate]) -> Gap:
    """How far a lane's build is behind a source of releases (see the module docstring for the rule)."""
    stable = stable_by_version(candidates)
    latest = stable[-1] if stable else None
    current = parse_engine_version(engine_version)
    if current is not None and not says_nothing(current):
        rule: GapRule = "version"
    elif image_built is not None:
        rule = "build-date"
    else:
        return Gap("unknown", latest, (), None)
    behind = tuple(c for c in stable if is_newer(c, engine_version, image_built))
    days: int | None = 0
    if behind:
        newest = behind[-1]
        days = None if image_built is None or newest.published is None else (newest.published - image_built).days
        days = None if days is None else max(0, days)
    return Gap(rule, latest, behind, days)


@dataclass(frozen=True)
class HeadGap:
    rule: GapRule
    head: str | None
    head_day: date | None
    commits_behind: int | None
    """Recorded commits after the lane's commit; None when the lane's commit is not among them."""
    days_behind: int | None
    subjects: tuple[str, ...] = ()
    """Subjects of the commits behind, newest first (at most a few are shown)."""


def head_gap(
    engine_version: str,
    image_built: date | None,
    heads: Sequence[tuple[str, float, Sequence[tuple[str, str]]]],
) -> HeadGap:
    """How far a build of a branch is behind the branch's recorded heads (oldest head first)."""
    if not heads:
        return HeadGap("unknown", None, None, None, None)
    sha, committed, _ = heads[-1]
    head_day = day_of(committed) if committed else None
    timeline: list[tuple[str, str]] = []
    for _head, _when, commits in heads:
        timeline.extend(reversed(list(commits)))  # oldest first across heads
    mine = commit_of(parse_engine_version(engine_version))
    if mine is not None:
        for index in range(len(timeline) - 1, -1, -1):
            if timeline[index][0].startswith(mine):
                after = timeline[index + 1 :]
                days = _days(head_day, image_built, bool(after))
                return HeadGap("commit", sha, head_day, len(after), days, tuple(s for _, s in reversed(after)))
        if sha.startswith(mine):
            return HeadGap("commit", sha, head_day, 0, 0)
    if image_built is None or head_day is None:
        return HeadGap("unknown", sha, head_day, None, None)
    return HeadGap("build-date", sha, head_day, None, _days(head_day, image_built, True))


def _days(newest: date | None, built: date | None, behind: bool) -> int | None:
    if not behind:
        return 0
    if newest is None or built is None:
        return None
    return max(0, (newest - built).days)


def dated_gap(image_built: date | None, tags: Sequence[tuple[str, date]]) -> Gap:
    """Tags that carry only a date (`nightly-20261015`): newer means dated after the build."""
    ordered = sorted(tags, key=lambda t: (t[1], t[0]))
    as_candidates = [Candidate(tag, Version("0"), day) for tag, day in ordered]
    latest = as_candidates[-1] if as_candidates else None
    if image_built is None:
        return Gap("unknown", latest, (), None)
    behind = tuple(c for c in as_candidates if c.published is not None and c.published > image_built)
    return Gap("build-date", latest, behind, _days(latest.published if latest else None, image_built, bool(behind)))


def humanize_days(days: int | None) -> str:
    if days is None:
        return "? days"
    text = f"{days} day{'s' if days != 1 else ''}"
    return f"{text} (~{round(days / 7)} weeks)" if days >= 14 else text
