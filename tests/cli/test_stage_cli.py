"""The `stage` step through `lanes plan` and `lanes apply` on simulated Sparks: a model with an origin is checked
on every rank host against its manifest before anything stops (a host holding it copies nothing), a host missing
it is no longer refused at planning but staged, and a staging that cannot copy fails the lane with nothing
stopped, naming the host. The simulator answers the model check as a real host does and refuses rsync, which it
does not run: copies are shown on the rig (tests/rig/test_staging.py, tests/rig/test_stage_apply.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support.simfleet import QWEN, SMALL, SimFleet, sim_fleet
from tests.support.sparks import loopback

pytestmark = pytest.mark.timeout(120)
ROOT = "/srv/models/qwen"
FILES = {"config.json": b'{"model_type": "qwen3"}', "model-00001-of-00001.safetensors": b"w" * 4096}


def with_origin(fleet: SimFleet, seqs: int = 8) -> dict[str, bytes]:
    """The sim fleet's state, its model staged from spark3 (a Spark holding it) with a manifest."""
    files = fleet.files(seqs=seqs)
    files["state/models/qwen.yaml"] += b"origin: {host: spark3}\n"
    entries = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(FILES.items())]
    total = sum(len(d) for d in FILES.values())
    manifest = {"model": "qwen", "revision": None, "index": None, "files": entries, "total_bytes": total}
    files["state/models/qwen.manifest.json"] = json.dumps(manifest, indent=2).encode()
    return files


async def test_a_staged_model_is_checked_before_anything_stops(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(64)) as fleet:
        for host in ("spark1", "spark2", "spark3"):
            fleet.env.fleet.runtime(host).models.put(ROOT, FILES)
        fleet.commit(with_origin(fleet), "qwen staged from spark3")
        args = fleet.connect()
        code, out, err = await fleet.lanes("plan", *args, "--json", "--lane", QWEN)
        assert code == 0, out + err
        steps = [s["kind"] for s in json.loads(out)["lanes"][0]["steps"]]
        assert steps.index("stage") == steps.index("pull") + 1 < steps.index("start"), steps
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code == 0, out + err
        assert "model qwen staged" in out + err and "every host already held it" in out + err, out + err
        # The check ran on the rank hosts and the origin; nothing was copied (the sim would refuse rsync).
        checked = {h for h in ("spark1", "spark2", "spark3") if fleet.env.fleet.runtime(h).models.requests}
        assert checked == {"spark1", "spark2", "spark3"}


async def test_a_host_missing_the_model_is_staged_not_refused_and_a_failed_copy_stops_nothing(
    tmp_path: Path,
) -> None:
    async with sim_fleet(tmp_path, loopback(65)) as fleet:
        for host in ("spark1", "spark2", "spark3"):
            fleet.env.fleet.runtime(host).models.put(ROOT, FILES)
        fleet.commit(with_origin(fleet), "qwen staged from spark3")
        args = fleet.connect()
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code == 0, out + err
        running = {h: sorted(fleet.env.fleet.runtime(h).containers) for h in ("spark1", "spark2")}
        # A byte flipped on spark1, and a change to qwen-a: the plan stages (no refusal at planning) ...
        flipped = dict(FILES, **{"model-00001-of-00001.safetensors": b"x" + b"w" * 4095})
        fleet.env.fleet.runtime("spark1").models.put(ROOT, flipped)
        fleet.commit(with_origin(fleet, seqs=6), "qwen-a: 6 sequences")
        code, out, err = await fleet.lanes("plan", *args, "--json", "--lane", QWEN)
        lane = json.loads(out)["lanes"][0]
        assert (code, lane["action"]) == (0, "deploy"), out + err
        # ... and the copy, which the simulated host refuses, fails the lane before any stop.
        code, out, err = await fleet.lanes("apply", *args, "--yes", "--json", "--lane", QWEN)
        assert code == 1, out + err
        (result,) = [r for r in json.loads(out)["results"] if r["lane"] == QWEN]
        assert result["result"] == "failed" and "spark1" in result["error"], result
        assert "copying qwen from spark3 failed" in result["error"], result
        assert {h: sorted(fleet.env.fleet.runtime(h).containers) for h in ("spark1", "spark2")} == running
        assert SMALL in json.dumps(running)
