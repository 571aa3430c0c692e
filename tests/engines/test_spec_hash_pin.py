"""The spec hash of every rank of every example lane, pinned as literals.

A container's spec hash (`lanes.spec` label, `compute_spec_hash`) is how the
planner tells a rank that runs what the commit asks for from one that must be
replaced: a rank whose hash differs is stopped and started again. So an
accidental change to hashing (a field added to or dropped from the hashed
body, a label renamed or moved between modules with a different key, a
different JSON canonicalisation, an env or mount order that changes) would
restart every lane of every fleet on upgrade, all at once, with no change in
any lane file. This test fails on any such change.

A deliberate change (a new rendering of an engine's flags, a new field in
the spec, a new `SPEC_SCHEMA`) updates the literals below, and its commit
message says what an upgrade to it restarts: which engines, which lanes,
every rank or only some. An edit to an example lane in `state/` changes that
lane's hashes too; that is expected, and restarts only that lane.

The commit a lane is rendered at is provenance only (`lanes.commit`, not
hashed), so any commit gives these values.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.engines import render_lane
from reconciler.spec import load_desired

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]

PINNED: dict[str, tuple[str, ...]] = {
    "dsv41-flash-1017-4x-sglang": ("936ce99e876fbdd4", "97de1d7b4b2e0be7", "c596ffa8da411f9c", "f2905a3fc83d107e"),
    "eugr-nightly-dsv41-3x": ("aa881c7a94836f3f", "6cb0feae035a6853", "f34b33f5de02254f"),
    "glm53-mxfp4-fp8-4x-r39": ("7e2cf39456eff51d", "15592358c611b5cc", "5be820eb40ad1f26", "dfa22d63d07196a0"),
    "minimax-m31-flash-4x-flare": ("0370947ee0396615", "882a08a64031fb07", "967ff199d1f046aa", "708039a6ee882813"),
}
"""Lane -> spec hash of rank 0, 1, ... as rendered from `state/` (running and stopped lanes alike)."""


def _hashes(commit: str) -> dict[str, tuple[str, ...]]:
    root = REPO / "state"
    files = {p.relative_to(REPO).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    desired = load_desired(files, commit)
    return {
        name: tuple(
            spec.spec_hash
            for spec in render_lane(lane, desired.models[lane.model], desired.fleet, desired.hosts, desired.commit)
        )
        for name, lane in desired.lanes.items()
    }


def test_every_example_lane_is_pinned() -> None:
    assert sorted(_hashes("e" * 40)) == sorted(PINNED)


@pytest.mark.parametrize("lane", sorted(PINNED))
def test_the_spec_hash_of_each_rank_is_unchanged(lane: str) -> None:
    for commit in ("e" * 40, "0123456789abcdef" * 2 + "01234567"):
        assert _hashes(commit)[lane] == PINNED[lane], (
            f"the spec hashes of {lane} changed: an upgrade would restart its ranks (see this module's docstring)"
        )
