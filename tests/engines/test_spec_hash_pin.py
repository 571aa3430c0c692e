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

# What changed the pins, and what an upgrade to that change restarts:
# - issue 13, the contract's ulimits (--ulimit memlock=-1:-1, --ulimit stack=67108864) on privileged
#   containers too: every rank of every lane of a privileged fleet (the example fleet's mode), all
#   engines, restarts once on upgrade; rootless fleets (the rig) already had them and restart nothing.
# - issue 13, the production hosts' placeholder fabric gains the second CX-7 function (roceP2p1s0f0) the
#   lane's launcher lists: a state edit, so only the lanes on dgx1-4 (NCCL_IB_HCA) restart; an upgrade of
#   lanes itself restarts nothing for it (a host with one port per subnet renders as before).
# - issue 13, the production lane's env and mount switch its image's overlay on (SPARK_ENGRAM_DIR): a
#   state edit of that lane alone, which restarts its four ranks and nothing else.
# - issue 25, the production lane's per-node values (host_env: its GID index, RoCE devices, fabric prefix and
#   address), its RDMA collectives on and its JIT cache mount: a state edit of that lane alone (its four
#   ranks restart once); lanes without host_env render as before. Pinned as rendered without a probe (the
#   GID index a placeholder): a probed rank's hash holds its host's own index.
PINNED: dict[str, tuple[str, ...]] = {
    "dsv41-flash-1017-4x-sglang": ("ccd63e18381f4889", "ddab152692f269b6", "ba0472f05ac427a8", "8ad86b9cbcf28b3d"),
    "eugr-nightly-dsv41-3x": ("b74015ed9dd8e3a9", "3fa43096450a9691", "48d16f1273a88bb7"),
    "glm53-mxfp4-fp8-4x-r39": ("61ba0c452f5ad8bb", "6e872e1a2667c569", "33ea280c9e0acf09", "5ace1e9cbcdf2425"),
    "minimax-m31-flash-4x-flare": ("d2f801353e40d184", "139f7f06e75ac072", "4e75858d51b0ccce", "4ae166044dd16f12"),
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
