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
    "dsv41-flash-1017-4x-sglang": ("90f6750bf1aaa87e", "1d5b89593e42d860", "32450e5cf85e424a", "97713431111f855a"),
    "eugr-nightly-dsv41-3x": ("e23621597256ac2e", "4b8287cb814528a3", "b75d5350bbe41349"),
    "glm53-mxfp4-fp8-4x-r39": ("89f9475066a863b0", "3e09814778ad305b", "2d6031cf98622bce", "89611e5425e6de5f"),
    "minimax-m31-flash-4x-flare": ("e0818e2c7489d4be", "7a5eaee35d6a4674", "9d9940964919dd61", "df8f58f1c865e648"),
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
