"""Tags, engine versions, track qualification and the gap rule (pure)."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from reconciler.errors import InputError
from reconciler.upstream.versions import (
    Candidate,
    commit_of,
    date_in_tag,
    head_gap,
    humanize_days,
    is_newer,
    parse_day,
    parse_tag,
    qualifies,
    release_gap,
    says_nothing,
)

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("tag", "version", "variant"),
    [
        ("v0.32.0", "0.32.0", ""),
        ("v0.5.22", "0.5.22", ""),
        ("v0.5.5.post3", "0.5.5.post3", ""),
        ("v0.6.0rc1", "0.6.0rc1", ""),
        ("v0.5.22-cu130", "0.5.22", "cu130"),
        ("v0.5.22-cu130-arm64", "0.5.22", "cu130-arm64"),
        ("v0.6.0-rc1-cu130", "0.6.0rc1", "cu130"),
        ("0.32.0", "0.32.0", ""),
        ("v0.26.1rc0+glm53.r39", "0.26.1rc0+glm53.r39", ""),
    ],
)
def test_tags_split_into_a_pep440_version_and_a_variant(tag: str, version: str, variant: str) -> None:
    parsed = parse_tag(tag)
    assert parsed is not None
    assert (str(parsed.version), parsed.variant) == (version, variant)


@pytest.mark.parametrize("tag", ["nightly-20261015", "latest", "main", "", "vnext"])
def test_names_are_not_versions(tag: str) -> None:
    assert parse_tag(tag) is None


def test_ordering_follows_pep440() -> None:
    tags = ["v0.5.22", "v0.5.5.post3", "v0.6.0rc1", "v0.5.5", "v0.6.0", "v0.5.22-cu130"]
    ordered = sorted(tags, key=lambda t: (p.version, p.variant) if (p := parse_tag(t)) else (Version("0"), ""))
    assert ordered == ["v0.5.5", "v0.5.5.post3", "v0.5.22", "v0.5.22-cu130", "v0.6.0rc1", "v0.6.0"]


def test_placeholders_commits_and_dates() -> None:
    assert says_nothing(Version("0.0.0.dev1+gda64c5cbb")) and says_nothing(Version("0.0.0+g4e2a91c"))
    assert not says_nothing(Version("0.26.1rc0+glm53.r39.vllm9e5d1793"))
    assert commit_of(Version("0.32.1.dev0+g8244d1c44")) == "8244d1c44"
    assert commit_of(Version("0.26.1rc0+glm53.r39.vllm9e5d1793")) is None
    assert date_in_tag("nightly-20261015") == date(2026, 10, 15)
    assert date_in_tag("nightly-20261399") is None
    assert parse_day("2026-10-18T17:00:00Z") == date(2026, 10, 18)
    assert humanize_days(20) == "20 days (~3 weeks)" and humanize_days(1) == "1 day"


def test_a_track_qualifies_by_specifier_and_prereleases() -> None:
    assert qualifies(Version("0.5.22"), ">=0.5.22", False)
    assert not qualifies(Version("0.5.21"), ">=0.5.22", False)
    assert not qualifies(Version("0.6.0rc1"), "", False)
    assert qualifies(Version("0.6.0rc1"), "", True)
    assert qualifies(Version("0.6.0rc1"), ">=0.5,<0.7", True)
    with pytest.raises(InputError, match=r"track\.versions"):
        qualifies(Version("1.0"), "~>1.0", False)


def cand(version: str, day: str) -> Candidate:
    return Candidate(f"v{version}", Version(version), date.fromisoformat(day))


def test_newer_by_version_or_by_build_date_when_the_version_says_nothing() -> None:
    built = date(2026, 9, 29)
    assert is_newer(cand("0.32.0", "2026-10-18"), "0.26.1rc0+glm53.r39.vllm9e5d1793", built)
    assert not is_newer(cand("0.32.0", "2026-10-18"), "0.32.0+fork.1", built)  # a fork of 0.32.0 sorts after it
    assert is_newer(cand("0.5.22", "2026-10-19"), "0.0.0.dev1+gda64c5cbb", built)
    assert not is_newer(cand("0.5.21", "2026-09-10"), "0.0.0.dev1+gda64c5cbb", built)
    assert is_newer(cand("0.5.22", "2026-10-19"), "0.0.0.dev1", None) is None


def test_gap_counts_stable_releases_once_each_and_days_from_the_build() -> None:
    releases = [cand(f"0.{m}.0", f"2026-{m - 20:02d}-01") for m in range(27, 33)]
    releases += [Candidate("v0.32.0-cu130", Version("0.32.0"), date(2026, 12, 1), variant="cu130")]
    releases += [Candidate("v0.33.0rc1", Version("0.33.0rc1"), date(2026, 12, 2), prerelease=True)]
    gap = release_gap("0.26.1rc0+glm53.r39.vllm9e5d1793", date(2026, 6, 1), releases)
    assert gap.rule == "version" and gap.releases_behind == 6 and gap.minors_behind == 6
    assert [str(c.version) for c in gap.behind] == ["0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    assert gap.latest is not None and gap.latest.version == Version("0.32.0") and gap.latest.variant == ""
    assert gap.days_behind == (date(2026, 12, 1) - date(2026, 6, 1)).days
    current = release_gap("0.32.1.dev0+g8244d1c44", date(2026, 10, 15), releases)
    assert current.releases_behind == 0 and current.days_behind == 0
    assert release_gap("0.0.0.dev1", None, releases).rule == "unknown"


def test_head_gap_counts_recorded_commits_after_the_builds_commit() -> None:
    heads = [
        ("a" * 40, 1_792_000_000.0, [("a" * 40, "three"), ("8244d1c44" + "0" * 31, "two"), ("c" * 40, "one")]),
        ("d" * 40, 1_792_086_400.0, [("d" * 40, "five"), ("e" * 40, "four")]),
    ]
    gap = head_gap("0.32.1.dev0+g8244d1c44", date(2026, 10, 15), heads)
    assert gap.rule == "commit" and gap.commits_behind == 3
    assert gap.subjects == ("five", "four", "three")
    unknown = head_gap("0.0.0+g4e2a91c", None, heads)
    assert unknown.rule == "unknown" and unknown.commits_behind is None


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 5)), min_size=1, max_size=12))
def test_releases_behind_never_counts_one_version_twice_or_an_older_one(parts: list[tuple[int, int, int]]) -> None:
    releases = [Candidate(f"v{a}.{b}.{c}", Version(f"{a}.{b}.{c}"), date(2026, 1, 1)) for a, b, c in parts]
    gap = release_gap("1.20.0", date(2026, 1, 1), releases)
    versions = [c.version for c in gap.behind]
    assert versions == sorted(set(versions))
    assert all(v > Version("1.20.0") for v in versions)
    assert gap.releases_behind == len({Version(f"{a}.{b}.{c}") for a, b, c in parts} & set(versions))
