"""A commit may name on the control node only folders under the operator's origin roots (issue 24, hole 1).

`lanes apply` on simulated Sparks, the model's `origin: {path: ...}` pointing at the folder that holds the
SSH key `lanes` runs with. Before, the stage step ran `rsync ... <that folder>/` to the Spark with that
very key (it failed only because the simulated Spark has no rsync). Now the origin is refused before
rsync starts: without `--origin-root` no folder may be sent, and with one a folder outside it, a symlink
into it, or a root holding the key are refused; a file that differs from the manifest is refused before
any byte leaves.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.support.simfleet import QWEN, SimFleet, sim_fleet
from tests.support.sparks import loopback

pytestmark = pytest.mark.timeout(120)
FILES = {"config.json": b'{"model_type": "qwen3"}', "model-00001-of-00001.safetensors": b"w" * 4096}


def with_local_origin(fleet: SimFleet, folder: Path, seqs: int = 8) -> dict[str, bytes]:
    """The sim fleet's state, its model staged from `folder` on the control node (`seqs`: a new spec each time)."""
    files = fleet.files(seqs=seqs)
    files["state/models/qwen.yaml"] += f'origin: {{path: "{folder}"}}\n'.encode()
    entries = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in sorted(FILES.items())]
    total = sum(len(d) for d in FILES.values())
    manifest = {"model": "qwen", "revision": None, "index": None, "files": entries, "total_bytes": total}
    files["state/models/qwen.manifest.json"] = json.dumps(manifest, indent=2).encode()
    return files


async def _apply(fleet: SimFleet, *extra: str) -> str:
    code, out, err = await fleet.lanes("apply", *fleet.connect(), "--yes", "--json", "--lane", QWEN, *extra)
    assert code == 1, out + err
    (result,) = [r for r in json.loads(out)["results"] if r["lane"] == QWEN]
    assert result["result"] == "failed", result
    return str(result["error"])


def _rsync_runs(fleet: SimFleet) -> list[str]:
    return [" ".join(a) for h in ("spark1", "spark2") for a in fleet.env.fleet.commands_seen(h) if "rsync" in a[0:1]]


async def test_an_origin_naming_the_key_folder_or_outside_the_roots_is_refused_before_rsync(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    async with sim_fleet(tmp_path, loopback(71)) as fleet:
        key_folder = fleet.env.fleet.client_key_path.parent
        fleet.commit(with_local_origin(fleet, key_folder), "qwen from the control node")
        error = await _apply(fleet)
        assert "refused: no origin roots are configured" in error, error

        roots = tmp_path_factory.mktemp("nas") / "models"  # apart from the journal's and the key's folders
        (roots / "qwen").mkdir(parents=True)
        for name, data in FILES.items():
            (roots / "qwen" / name).write_bytes(data)
        fleet.commit(with_local_origin(fleet, key_folder, seqs=7), "qwen-a: 7 sequences")
        error = await _apply(fleet, "--origin-root", str(roots))
        assert "not under an allowed origin root" in error, error

        # A symlink under the root that leads to the key's folder.
        (roots / "keys").symlink_to(key_folder)
        fleet.commit(with_local_origin(fleet, roots / "keys", seqs=6), "qwen from a link")
        error = await _apply(fleet, "--origin-root", str(roots))
        assert "is a symlink" in error, error

        # A root that holds the key is refused as a setting (exit 2, the flag named).
        code, out, err = await fleet.lanes(
            "apply", *fleet.connect(), "--yes", "--json", "--origin-root", str(key_folder.parent)
        )
        assert code == 2 and "--origin-root" in out + err and "overlaps" in out + err, out + err
        assert _rsync_runs(fleet) == []


async def test_an_origin_file_that_differs_from_the_manifest_sends_nothing(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    async with sim_fleet(tmp_path, loopback(72)) as fleet:
        roots = tmp_path_factory.mktemp("nas") / "models"  # apart from the journal's and the key's folders
        (roots / "qwen").mkdir(parents=True)
        for name, data in FILES.items():
            (roots / "qwen" / name).write_bytes(data)
        (roots / "qwen" / "config.json").write_bytes(b'{"model_type": "evil0"}')  # same size, other bytes
        fleet.commit(with_local_origin(fleet, roots / "qwen"), "qwen from the control node")
        error = await _apply(fleet, "--origin-root", str(roots))
        assert "config.json" in error and "sha256 differs from the manifest's; nothing is sent" in error, error
