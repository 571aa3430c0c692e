"""What `lanes model status` and `unused` make of the hosts' answers, and which hosts they ask, without hosts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reconciler.cli.modelhosts import kept_on, model_hosts, model_parents, summarize
from reconciler.cli.modelremote import target_in_tree
from reconciler.cli.models import status_pairs
from reconciler.errors import InputError
from reconciler.facts.modelcheck import FileState, ModelCheck
from reconciler.spec.load import DesiredState
from reconciler.spec.manifest import Manifest, ManifestFile
from reconciler.spec.origin import Origin
from reconciler.transport.base import HostTarget
from tests.policy.builders import host, lane, model, state

pytestmark = pytest.mark.timeout(10)

MANIFEST = Manifest(
    model="m",
    revision=None,
    index=None,
    files=(ManifestFile(path="a", size=100, sha256="0" * 64), ManifestFile(path="b", size=50, sha256="1" * 64)),
    total_bytes=150,
)


def check(**states: FileState) -> ModelCheck:
    return ModelCheck(root="/models/m", exists=True, free_bytes=7, files=states, hashed=(), errors=())


@pytest.mark.parametrize(
    ("a", "b", "state", "verified", "on_disk"),
    [
        (FileState("ok", 100, 0), FileState("ok", 50, 0), "present", 150, 150),
        (FileState("ok", 100, 0), FileState("partial", 20, 0), "partial", 100, 120),
        (FileState("missing", 0, 0), FileState("partial", 0, 30), "partial", 0, 30),  # only rsync's partial bytes
        (FileState("missing", 0, 0), FileState("missing", 0, 0), "missing", 0, 0),
        (FileState("mismatch", 100, 0), FileState("partial", 10, 0), "mismatched", 0, 110),
    ],
)
def test_a_hosts_answer_summed_up(a: FileState, b: FileState, state: str, verified: int, on_disk: int) -> None:
    row = summarize("m", "h0", MANIFEST, check(a=a, b=b))
    assert (row.state, row.verified_bytes, row.on_disk_bytes, row.total_bytes, row.free_bytes) == (
        state,
        verified,
        on_disk,
        150,
        7,
    )


def test_a_file_the_host_did_not_mention_counts_as_missing() -> None:
    row = summarize("m", "h0", MANIFEST, check(a=FileState("ok", 100, 0)))
    # a is there and verified (100 bytes on disk), b is not mentioned: partial, b missing.
    assert (row.state, row.not_ok, row.counts["missing"], row.verified_bytes) == ("partial", {"b": "missing"}, 1, 100)


def fleet() -> DesiredState:
    out = state(
        [host(h) for h in ("h0", "h1", "h2", "h3")],
        [model("m"), model("n"), model("o")],
        [lane("l", "m", ["h0", "h1"]), lane("s", "m", ["h1"], desired="stopped"), lane("k", "n", ["h2"])],
    )
    m = out.models["m"].model_copy(update={"origin": Origin(host="h3", path="/srv/m")})
    return dataclasses.replace(out, models={**out.models, "m": m}, manifests={"m": MANIFEST})


def test_which_hosts_hold_a_model_and_which_folders_each_keeps() -> None:
    desired = fleet()
    assert model_hosts(desired, "m") == ["h0", "h1", "h3"]  # its lanes' hosts (a stopped one too), its origin
    assert model_parents(desired) == ["/models"]
    assert kept_on(desired, "h1") == {"/models/m": "lane l serves model m from it"}
    assert kept_on(desired, "h3") == {"/srv/m": "it is model m's origin"}
    assert kept_on(desired, "h2") == {"/models/n": "lane k serves model n from it"}


def test_status_checks_models_with_a_manifest_on_their_hosts() -> None:
    desired = fleet()
    assert status_pairs(desired, None, []) == [("m", "h0"), ("m", "h1"), ("m", "h3")]
    assert status_pairs(desired, "m", ["h2"]) == [("m", "h2")]
    with pytest.raises(InputError, match="no manifest"):
        status_pairs(desired, "n", [])
    with pytest.raises(InputError, match="no model 'x'"):
        status_pairs(desired, "x", [])
    lonely = dataclasses.replace(
        desired, manifests={**desired.manifests, "o": MANIFEST.model_copy(update={"model": "o"})}
    )
    with pytest.raises(InputError, match="no lane's hosts"):
        status_pairs(lonely, "o", [])


def test_facts_reaches_an_origin_or_a_host_as_the_work_tree_declares_it(tmp_path: Path) -> None:
    (tmp_path / "state/hosts").mkdir(parents=True)
    (tmp_path / "state/fleet.yaml").write_text(
        "ssh_user: root\nssh_port: 2222\norigins:\n  - name: nas1\n    address: 192.0.2.50\n    ssh: {user: lanes}\n"
    )
    (tmp_path / "state/hosts/dgx1.yaml").write_text("address: 192.0.2.11\nssh: {port: 22}\n")
    assert target_in_tree(tmp_path, "state", "nas1") == HostTarget("nas1", "192.0.2.50", 2222, "lanes")
    assert target_in_tree(tmp_path, "state", "dgx1") == HostTarget("dgx1", "192.0.2.11", 22, "root")
    with pytest.raises(InputError, match="neither an origin"):
        target_in_tree(tmp_path, "state", "dgx9")
