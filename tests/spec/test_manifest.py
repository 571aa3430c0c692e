"""A model's `origin:`, the fleet's `origins:` and the manifest beside the model file, as the loader reads them.

Every mistake is an InputError naming the file and the field a person has to fix; a good manifest lands in
`DesiredState.manifests` exactly as written.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from reconciler.errors import InputError
from reconciler.facts.modelcheck import PARTIAL_DIR as HOST_PARTIAL_DIR
from reconciler.facts.modelcheck import STAMP_NAME
from reconciler.spec.load import DesiredState, load_desired
from reconciler.spec.manifest import PARTIAL_DIR, STAMP_FILE, Manifest, parse_manifest, render_manifest
from tests.support.example import repo_files

pytestmark = pytest.mark.timeout(20)

MODEL = "minimax-m3.1-flash"
MODEL_FILE = f"state/models/{MODEL}.yaml"
MANIFEST_FILE = f"state/models/{MODEL}.manifest.json"
REV = "a" * 40


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


CONFIG = b'{"architectures": ["MiniMaxM3SparseForCausalLM"]}'
SHARD = b"\x00" * 1000


def manifest_doc(**changes: object) -> dict[str, object]:
    files = [
        {"path": "config.json", "size": len(CONFIG), "sha256": _sha(CONFIG)},
        {"path": "model-00001-of-00001.safetensors", "size": len(SHARD), "sha256": _sha(SHARD)},
    ]
    doc: dict[str, object] = {
        "model": MODEL,
        "revision": REV,
        "index": None,
        "files": files,
        "total_bytes": len(CONFIG) + len(SHARD),
    }
    doc.update(changes)
    return doc


def files_with(
    origin: str | None, manifest: dict[str, object] | bytes | None, fleet_extra: str = ""
) -> dict[str, bytes]:
    files = repo_files()
    if origin is not None:
        files[MODEL_FILE] += f"origin: {origin}\n".encode()
    if manifest is not None:
        files[MANIFEST_FILE] = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    if fleet_extra:
        files["state/fleet.yaml"] += fleet_extra.encode()
    return files


NAS = "origins:\n  - name: nas1\n    address: 192.0.2.50\n    ssh: {user: lanes}\n"


def load(files: dict[str, bytes]) -> DesiredState:
    return load_desired(files, "c0ffee")


def error(files: dict[str, bytes]) -> InputError:
    with pytest.raises(InputError) as caught:
        load(files)
    return caught.value


def test_a_model_with_an_origin_and_its_manifest_loads() -> None:
    desired = load(files_with("{host: nas1, path: /volume1/models/MiniMax-M3.1-Flash}", manifest_doc(), NAS))
    model = desired.models[MODEL]
    assert model.origin is not None and (model.origin.host, model.origin.path) == (
        "nas1",
        "/volume1/models/MiniMax-M3.1-Flash",
    )
    manifest = desired.manifests[MODEL]
    assert manifest.total_bytes == 1000 + len(CONFIG)
    assert manifest.by_path()["config.json"].sha256 == _sha(CONFIG)
    assert desired.files[f"manifests/{MODEL}"] == MANIFEST_FILE
    origin = desired.fleet.origin("nas1")
    assert origin is not None and origin.ssh_user(desired.fleet) == "lanes" and origin.ssh_port(desired.fleet) == 22


def test_an_origin_on_the_control_node_or_a_fleet_host_needs_no_origins_entry() -> None:
    assert load(files_with("{path: /srv/models/minimax}", manifest_doc())).models[MODEL].origin is not None
    assert load(files_with("{host: dgx1}", manifest_doc())).models[MODEL].origin is not None


def test_the_example_state_without_manifests_still_loads() -> None:
    assert load(repo_files()).manifests == {}


def test_a_model_with_an_origin_needs_a_manifest() -> None:
    err = error(files_with("{host: dgx1}", None))
    assert (err.file, err.field) == (MODEL_FILE, "origin")
    assert f"lanes model manifest {MODEL} --from" in err.message
    assert err.line is not None


def test_an_origin_host_must_be_an_origin_or_a_host() -> None:
    err = error(files_with("{host: nas9, path: /x}", manifest_doc(), NAS))
    assert (err.file, err.field) == (MODEL_FILE, "origin.host")
    assert "nas1" in err.message and "dgx1" in err.message


def test_an_empty_origin_is_refused() -> None:
    err = error(files_with("{}", manifest_doc()))
    assert (err.file, err.field) == (MODEL_FILE, "origin")


def test_an_origin_may_not_take_a_hosts_name() -> None:
    err = error(files_with(None, None, "origins:\n  - name: dgx3\n    address: 192.0.2.50\n"))
    assert (err.file, err.field) == ("state/fleet.yaml", "origins[0].name")


def test_two_origins_of_one_name_are_refused() -> None:
    twice = NAS + "  - name: nas1\n    address: 192.0.2.51\n"
    err = error(files_with(None, None, twice))
    assert (err.file, err.field) == ("state/fleet.yaml", "origins")


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"total_bytes": 1}, "total_bytes", "add up to"),
        ({"revision": "main"}, "revision", "40-hex"),
        ({"index": "model.safetensors.index.json"}, "index", "not one of the files"),
        ({"model": "other"}, "model", "differs from the file name"),
        ({"extra": 1}, "extra", "unknown field"),
        ({"files": []}, "files", "at least 1"),
    ],
)
def test_a_manifest_field_that_is_wrong_is_named(change: dict[str, object], field: str, words: str) -> None:
    err = error(files_with(None, manifest_doc(**change)))
    assert (err.file, err.field) == (MANIFEST_FILE, field)
    assert words in err.message


def _with_file(path: object, size: object = 0, sha: object = None) -> dict[str, object]:
    doc = manifest_doc()
    files = list(doc["files"])  # type: ignore[call-overload]
    files.append({"path": path, "size": size, "sha256": sha or _sha(b"")})
    files.sort(key=lambda f: str(f["path"]))
    return {**doc, "files": files, "total_bytes": int(doc["total_bytes"]) + (size if isinstance(size, int) else 0)}  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("../etc/passwd", "'..' segment"),
        ("/etc/passwd", "absolute"),
        ("a//b", "empty"),
        ("./a", "'.'"),
        ("sub\\a", "backslash"),
        ("a\nb", "control character"),
        (f"{PARTIAL_DIR}/model-00001-of-00001.safetensors", PARTIAL_DIR),
        (f"sub/{PARTIAL_DIR}/x", PARTIAL_DIR),
        (STAMP_FILE, STAMP_FILE),
    ],
)
def test_a_path_that_could_leave_the_folder_or_names_lanes_files_is_refused(path: str, words: str) -> None:
    err = error(files_with(None, _with_file(path)))
    assert err.file == MANIFEST_FILE
    assert err.field is not None and err.field.startswith("files[") and err.field.endswith("].path")
    assert words in err.message


def test_a_file_listed_twice_or_out_of_order_is_refused() -> None:
    doc = manifest_doc()
    first = doc["files"][0]  # type: ignore[index]
    twice = {**doc, "files": [first, first, doc["files"][1]], "total_bytes": int(doc["total_bytes"]) + first["size"]}  # type: ignore[index, call-overload]
    err = error(files_with(None, twice))
    assert (err.field, "listed twice" in err.message) == ("files[1].path", True)
    swapped = {**doc, "files": list(reversed(doc["files"]))}  # type: ignore[call-overload]
    err = error(files_with(None, swapped))
    assert (err.field, "out of order" in err.message) == ("files[1].path", True)


def test_a_file_and_a_folder_of_one_name_are_refused() -> None:
    err = error(files_with(None, _with_file("config.json/x")))
    assert err.field is not None and "listed as a file" in err.message


@pytest.mark.parametrize(
    ("size", "words"), [("1000", "valid integer"), (1000.0, "valid integer"), (-1, "greater than or equal")]
)
def test_sizes_are_whole_byte_counts_never_converted(size: object, words: str) -> None:
    doc = manifest_doc()
    files = [dict(f) for f in doc["files"]]  # type: ignore[attr-defined]
    files[1]["size"] = size
    err = error(files_with(None, {**doc, "files": files}))
    assert (err.file, err.field) == (MANIFEST_FILE, "files[1].size")
    assert words in err.message


def test_a_bad_checksum_is_named() -> None:
    err = error(files_with(None, _with_file("x.bin", 0, "ABC")))
    assert err.field == "files[2].sha256"


def test_json_that_does_not_parse_or_repeats_a_key_is_refused_with_its_line() -> None:
    err = error(files_with(None, b'{\n  "model": "x",\n  oops\n}'))
    assert (err.file, err.line) == (MANIFEST_FILE, 3)
    text = json.dumps(manifest_doc())
    err = error(files_with(None, ('{"total_bytes": 1, ' + text[1:]).encode()))
    assert "appears twice" in err.message


def test_a_manifest_without_a_model_file_is_refused() -> None:
    files = repo_files()
    files["state/models/ghost.manifest.json"] = json.dumps(manifest_doc(model="ghost")).encode()
    err = error(files)
    assert err.file == "state/models/ghost.manifest.json" and "no model file" in err.message


def test_the_rendered_manifest_reads_back_the_same_and_one_file_per_line() -> None:
    manifest = Manifest.model_validate(manifest_doc(index="config.json"))
    text = render_manifest(manifest)
    assert parse_manifest("m.json", text.encode()) == manifest
    lines = text.splitlines()
    assert sum('"path"' in line for line in lines) == 2 and len(lines) == 10


def test_the_host_scripts_working_files_are_the_names_the_manifest_refuses() -> None:
    assert (PARTIAL_DIR, STAMP_FILE) == (HOST_PARTIAL_DIR, STAMP_NAME)
