"""`lanes apply` stages a lane's model before anything stops, on the rig: rig1-3 each have a models folder of
their own (a tmpfs in their sshd's mount namespace), rig4 holds the checkpoint (the model's origin), so every
copy is a real rsync over real sshd and the data plane. The lane's ranks start on the staged files; a byte
flipped on one host is found and repaired by the next change's stage step, before its old ranks stop; and
`lanes model sync` stages ahead of a change (nothing left to copy afterwards)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.rig.fleet import result_of, steps
from tests.rig.rig import Rig
from tests.rig.test_staging import FLIP_BYTE, HASH_TREE

pytestmark = [pytest.mark.rig, pytest.mark.timeout(240)]

MB = 1 << 20
MODEL = "staged"
RECEIVERS = ("rig1", "rig2", "rig3")
ORIGIN = "rig4"


def checkpoint(folder: Path) -> dict[str, bytes]:
    """A small multi-file checkpoint (about 40 MiB of random bytes) written into `folder`."""
    files = {"config.json": b'{"architectures": ["StageTestForCausalLM"]}', "tokenizer.json": os.urandom(MB)}
    for i, mib in enumerate((16, 12, 10), start=1):
        files[f"model-{i:05d}-of-00003.safetensors"] = os.urandom(mib * MB)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def state_files(rig: Rig, files: dict[str, bytes], model: str = MODEL) -> None:
    """The model file (origin: rig4, which holds it at its path) and its manifest, in the rig's work tree."""
    models = rig.repo.work / "state" / "models"
    body = json.loads((models / "tiny.yaml").read_text())
    # Six heads over three KV heads: a lane on the three receivers shards them (tp 3).
    arch = {**body["architecture"], "num_heads": 6, "kv_heads": 3, "hidden_size": 384}
    body.update(path=str(rig.models_root / model), origin={"host": ORIGIN}, architecture=arch)
    (models / f"{model}.yaml").write_text(json.dumps(body))
    entries = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(files.items())]
    manifest = {"model": model, "revision": None, "index": None, "files": entries,
                "total_bytes": sum(len(d) for d in files.values())}  # fmt: skip
    (models / f"{model}.manifest.json").write_text(json.dumps(manifest, indent=2))


MARGIN = "      margin_gib: 10\n"


def small_margin(rig: Rig, on: bool) -> None:
    """The rig's model folders are tmpfs of 200 MiB: a 10 GiB disk margin would deny every lane; the margin is
    then the largest file (the rule's floor)."""
    rules = rig.repo.work / "policies" / "rules.yaml"
    text = rules.read_text()
    rules.write_text(
        text.replace(MARGIN, "      margin_gib: 0\n") if on else text.replace("      margin_gib: 0\n", MARGIN)
    )


def held(rig: Rig, host: str) -> dict[str, str]:
    """sha256 of every file in the host's own copy of the model (read in its sshd's mount namespace)."""
    out = rig.in_mounts(host, ["python3", "-c", HASH_TREE, str(rig.models_root / MODEL)])
    found: dict[str, str] = json.loads(out.stdout)
    return found


def step_times(rig: Rig, lane: str, commit: str) -> dict[str, tuple[float, float]]:
    with sqlite3.connect(rig.db) as db:
        rows = db.execute(
            "SELECT kind, started, finished FROM journal WHERE lane = ? AND `commit` = ? ORDER BY id", (lane, commit)
        ).fetchall()
    return {str(kind): (float(start), float(end or 0)) for kind, start, end in rows}


def test_apply_stages_the_model_before_anything_stops_and_repairs_a_flipped_byte(rig: Rig) -> None:
    source = rig.models_root / MODEL
    files = checkpoint(source)  # rig4 sees the machine's own folder: it holds the model
    want = {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}
    try:
        for host in RECEIVERS:
            rig.own_models(host, 200)  # an empty models folder of its own
        state_files(rig, files)
        small_margin(rig, True)
        lane = rig.lane("trio", RECEIVERS)
        lane["model"] = MODEL
        first = rig.publish({"trio": lane}, "trio on rig1-3, its model staged from rig4")
        run = rig.apply()
        assert run.returncode == 0, run.describe()
        assert result_of(run, "trio")["result"] == "applied", run.describe()
        kinds = [k for k, _ in steps(rig, "trio", first)]
        assert kinds.index("stage") < kinds.index("start"), kinds
        for host in RECEIVERS:
            assert held(rig, host) == want, host

        # A byte flipped on rig2 (its mtime put back), then a change of the lane: its stage step finds and
        # repairs the file, and finishes before the old ranks stop.
        shard = rig.models_root / MODEL / "model-00002-of-00003.safetensors"
        rig.in_mounts("rig2", ["python3", "-c", FLIP_BYTE, str(shard), str(5 * MB)])
        assert held(rig, "rig2") != want
        lane["env"] = {"STANDIN_NOTE": "second"}
        second = rig.publish({"trio": lane}, "trio: a new spec")
        run = rig.apply()
        assert run.returncode == 0, run.describe()
        times = step_times(rig, "trio", second)
        assert times["stage"][1] <= times["stop"][0], times
        assert held(rig, "rig2") == want

        # lanes model sync: nothing left to copy, every host checked.
        sync = rig.lanes("model", "sync", MODEL, "--repo", str(rig.clone), "--ssh-key", str(rig.client_key),
                         "--known-hosts", str(rig.known_hosts), "--json")  # fmt: skip
        assert sync.returncode == 0, sync.describe()
        report = sync.json()
        assert sorted(report["hosts"]) == list(RECEIVERS) and not any(report["copied"].values()), report
    finally:
        for host in RECEIVERS:
            rig.restore_sshd(host)
        shutil.rmtree(source, ignore_errors=True)
        small_margin(rig, False)
        for name in (f"{MODEL}.yaml", f"{MODEL}.manifest.json"):
            (rig.repo.work / "state" / "models" / name).unlink(missing_ok=True)
