"""`lanes model status`, `unused`, `remove` and `manifest --from HOST:DIR` against simulated Sparks, over SSH.

Each simulated host holds the model files a test puts there (`reconciler.sim.modelfiles`); the real
commands ask them with the real argv and stdin, and every figure expected here is worked out from the
bytes the test wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.facts.modelcheck import MODELCHECK_MARKER, modelcheck_argv
from reconciler.sim.hostfacts import SimHostFacts
from reconciler.sim.modelfiles import SimModelFiles
from tests.support.simfleet import SimFleet, sim_fleet
from tests.support.sparks import loopback

pytestmark = pytest.mark.timeout(120)  # several `lanes` processes per test, on a busy machine

ROOT = "/srv/models/qwen"
SHARD = os.urandom(200_003)
INDEX = json.dumps({"metadata": {"total_size": 199_900}, "weight_map": {"w": "model.safetensors"}}).encode()
FILES = {
    "config.json": b'{"architectures": ["Qwen3ForCausalLM"]}\n',
    "model.safetensors": SHARD,
    "model.safetensors.index.json": INDEX,
    "tokenizer/tokenizer.json": b'{"vocab": {}}' * 100,
}
TOTAL = sum(len(d) for d in FILES.values())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_json() -> bytes:
    files = [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in sorted(FILES.items())]
    doc = {"model": "qwen", "revision": None, "index": "model.safetensors.index.json", "files": files}
    return json.dumps({**doc, "total_bytes": TOTAL}).encode()


def with_origin(files: dict[str, bytes]) -> dict[str, bytes]:
    """Model qwen comes from spark3 (a fleet host that holds it), so it needs its manifest."""
    out = dict(files)
    out["state/models/qwen.yaml"] += b"origin: {host: spark3}\n"
    out["state/models/qwen.manifest.json"] = manifest_json()
    return out


def models_on(fleet: SimFleet, host: str) -> SimModelFiles:
    return fleet.env.fleet.runtime(host).models


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[SimFleet]:
    async with sim_fleet(tmp_path, loopback(118)) as sim:
        sim.commit(with_origin(sim.files()), "qwen staged from spark3")
        yield sim


async def lanes_json(fleet: SimFleet, *args: str) -> tuple[int, dict[str, Any], str]:
    env = fleet.env.fleet
    code, out, err = await fleet.lanes(
        *args, "--repo", str(fleet.repo), "--known-hosts", str(env.known_hosts_path),
        "--ssh-key", str(env.client_key_path), "--json",
    )  # fmt: skip
    return code, json.loads(out), err


async def test_status_says_per_host_what_it_holds_of_the_manifest(fleet: SimFleet) -> None:
    models_on(fleet, "spark1").put(ROOT, FILES)
    flipped = bytes([SHARD[0] ^ 1]) + SHARD[1:]
    partial = {k: v for k, v in FILES.items() if k != "tokenizer/tokenizer.json"}
    models_on(fleet, "spark2").put(ROOT, {**partial, "model.safetensors": flipped})
    models_on(fleet, "spark2").set_partial(ROOT, "tokenizer/tokenizer.json", 300)
    code, out, err = await lanes_json(fleet, "model", "status")
    assert code == 1, err  # not present everywhere
    rows = {r["host"]: r for r in out["models"]}
    assert sorted(rows) == ["spark1", "spark2", "spark3"]  # the two lanes' hosts, then the origin
    one, two, three = rows["spark1"], rows["spark2"], rows["spark3"]
    assert (one["state"], one["verified_bytes"], one["on_disk_bytes"], one["total_bytes"]) == (
        "present",
        TOTAL,
        TOTAL,
        TOTAL,
    )
    tok = len(FILES["tokenizer/tokenizer.json"])
    assert two["state"] == "mismatched"
    assert two["verified_bytes"] == TOTAL - len(SHARD) - tok  # config and index only
    assert two["on_disk_bytes"] == TOTAL - tok + 300  # the flipped shard counts as on disk, plus the partial bytes
    assert two["not_ok"] == {"model.safetensors": "mismatch", "tokenizer/tokenizer.json": "partial"}
    assert two["counts"] == {"ok": 2, "partial": 1, "mismatch": 1, "missing": 0}
    assert (three["state"], three["verified_bytes"], three["on_disk_bytes"]) == ("missing", 0, 0)
    # One check per host per model, with the manifest's files on stdin.
    for host in ("spark1", "spark2", "spark3"):
        [request] = models_on(fleet, host).requests
        assert request["root"] == ROOT and len(request["files"]) == 4


async def test_status_exits_0_when_every_host_holds_the_model(fleet: SimFleet) -> None:
    for host in ("spark1", "spark2", "spark3"):
        models_on(fleet, host).put(ROOT, FILES)
    code, out, err = await lanes_json(fleet, "model", "status", "qwen", "--hosts", "spark1,spark3")
    assert code == 0, err
    assert [(r["host"], r["state"]) for r in out["models"]] == [("spark1", "present"), ("spark3", "present")]
    code, text, _ = await fleet.lanes(
        "model", "status", "--repo", str(fleet.repo), "--known-hosts", str(fleet.env.fleet.known_hosts_path),
        "--ssh-key", str(fleet.env.fleet.client_key_path),
    )  # fmt: skip
    assert code == 0
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines()[2:]]
    size = f"{TOTAL / 1000:.1f} kB"  # 201.4 kB verified, on disk and in the manifest
    assert rows == [["qwen", h, size, size, size, "1.8 TB", "present"] for h in ("spark1", "spark2", "spark3")]


async def test_a_host_that_does_not_answer_is_said_and_exits_4(fleet: SimFleet) -> None:
    models_on(fleet, "spark1").put(ROOT, FILES)
    await fleet.env.fleet.stop_host("spark2")
    code, out, _ = await lanes_json(fleet, "model", "status", "--hosts", "spark1,spark2")
    assert code == 4
    rows = {r["host"]: r for r in out["models"]}
    assert rows["spark1"]["state"] == "present" and rows["spark2"]["state"] == "unreachable"
    assert rows["spark2"]["error"]


async def test_unused_lists_folders_nothing_uses_and_remove_takes_only_those(fleet: SimFleet) -> None:
    old = {"w.bin": os.urandom(5000), "sub/c.json": b"{}"}
    for host in ("spark1", "spark2", "spark3"):
        models_on(fleet, host).put(ROOT, FILES)
        models_on(fleet, host).put("/srv/models/old-llama", old)
    code, out, err = await lanes_json(fleet, "model", "unused")
    assert code == 0, err
    assert out["parents"] == ["/srv/models"]
    listed = {h["host"]: [(f["path"], f["bytes"], f["model"]) for f in h["folders"]] for h in out["hosts"]}
    # qwen is used on spark1 and spark2 (lanes) and spark3 (its origin): only old-llama is unused.
    assert listed == {h: [("/srv/models/old-llama", 5002, None)] for h in ("spark1", "spark2", "spark3")}

    # A folder in use is refused, and nothing is removed anywhere.
    code, out, _ = await lanes_json(fleet, "model", "remove", "qwen", "--hosts", "spark1", "--yes")
    assert code == 2 and "in use on spark1: lane qwen-a serves model qwen" in out["error"]
    assert ROOT in models_on(fleet, "spark1").trees
    # Without --yes nothing happens either.
    code, out, _ = await lanes_json(fleet, "model", "remove", "old-llama", "--hosts", "spark1")
    assert code == 6 and "add --yes" in out["error"]
    assert "/srv/models/old-llama" in models_on(fleet, "spark1").trees

    code, out, err = await lanes_json(fleet, "model", "remove", "old-llama", "--hosts", "spark1,spark2", "--yes")
    assert code == 0, err
    assert out["path"] == "/srv/models/old-llama"
    assert [(r["host"], r["removed"], r["bytes"]) for r in out["hosts"]] == [
        ("spark1", True, 5002),
        ("spark2", True, 5002),
    ]
    assert "/srv/models/old-llama" not in models_on(fleet, "spark1").trees
    assert "/srv/models/old-llama" in models_on(fleet, "spark3").trees  # not named: kept
    assert ROOT in models_on(fleet, "spark2").trees

    # Gone from spark1: naming it there again is refused.
    code, out, _ = await lanes_json(fleet, "model", "remove", "/srv/models/old-llama", "--hosts", "spark1", "--yes")
    assert code == 2 and "does not list" in out["error"]


async def test_manifest_from_a_host_hash_there_and_read_its_index(fleet: SimFleet) -> None:
    models_on(fleet, "spark3").put(ROOT, {**FILES, ".git/HEAD": b"ref: refs/heads/main\n"})
    repo = fleet.repo
    for rel, data in with_origin(fleet.files()).items():  # the work tree the command writes into
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    (repo / "state/models/qwen.manifest.json").unlink()
    code, out, err = await lanes_json(fleet, "model", "manifest", "qwen", "--from", f"spark3:{ROOT}")
    assert code == 0, err
    assert (out["files"], out["total_bytes"], out["index"], out["left_out"]) == (
        4,
        TOTAL,
        "model.safetensors.index.json",
        [".git/"],
    )
    doc = json.loads((repo / "state/models/qwen.manifest.json").read_text())
    assert doc["files"] == [{"path": p, "size": len(d), "sha256": sha(d)} for p, d in sorted(FILES.items())]
    # weight_bytes 16 GB in the model file against the index's 199,900: said.
    assert any("total_size is 199900" in w for w in out["warnings"])
    assert [r["mode"] for r in models_on(fleet, "spark3").requests] == ["hash"]


async def test_manifest_from_a_host_without_the_folder_is_bad_input(fleet: SimFleet) -> None:
    repo = fleet.repo
    for rel, data in fleet.files().items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    code, out, _ = await lanes_json(fleet, "model", "manifest", "qwen", "--from", "spark2:/srv/models/none")
    assert code == 2 and out["field"] == "--from" and "has no folder /srv/models/none" in out["error"]
    code, out, _ = await lanes_json(fleet, "model", "manifest", "qwen", "--from", "nas9:/x")
    assert code == 2 and "neither an origin" in out["error"]
    # A host that does not answer is not bad input: exit 1, naming it.
    await fleet.env.fleet.stop_host("spark2")
    code, out, _ = await lanes_json(fleet, "model", "manifest", "qwen", "--from", f"spark2:{ROOT}")
    assert code == 1 and "spark2" in out["error"] and "unreachable" in out["error"]


def test_the_sim_refuses_a_model_check_it_was_not_built_for() -> None:
    files = SimModelFiles(SimHostFacts())
    status, _, err = files.execute(["python3", "-I", "-c", "print(1)", MODELCHECK_MARKER], "{}")
    assert status == 2 and "argv differs" in err
    status, _, err = files.execute(
        modelcheck_argv(), json.dumps({"mode": "check", "root": ROOT, "files": [], "extra": 1})
    )
    assert status == 2 and "bad arguments" in err


async def test_plan_denies_a_lane_whose_host_cannot_take_the_model(fleet: SimFleet) -> None:
    # spark2's model disk has 1 GiB free and none of the model: the margin is max(10 GiB floor, 0 %, the
    # 200,003-byte shard) = 10 GiB, so it needs the model's bytes + 10 GiB. spark1 holds the model already.
    spark2 = fleet.env.fleet.runtime("spark2").facts
    spark2.models.pop(ROOT)  # the simulated fleet starts with every model in place: not this time
    spark2.disk_by_path[ROOT] = (4 << 40, 1 << 30)
    code, out, err = await fleet.lanes("plan", *fleet.connect(), "--json")
    lanes = {lane["name"]: lane for lane in json.loads(out)["lanes"]}
    assert code == 1, err
    assert lanes["qwen-b"]["action"] == "denied"
    assert "model-disk" in lanes["qwen-b"]["reason"]
    assert f"needs {(TOTAL + (10 << 30)) / (1 << 30):.1f} GiB" in lanes["qwen-b"]["reason"]
    assert "spark2: /srv/models/qwen has 1.0 GiB free" in lanes["qwen-b"]["reason"]
    assert lanes["qwen-a"]["action"] != "denied"
    code, out, _ = await fleet.lanes("check", "--repo", str(fleet.repo), "--json")
    assert [v for v in json.loads(out)["violations"] if v["rule"] == "model-disk"] == []  # no host facts: silent
