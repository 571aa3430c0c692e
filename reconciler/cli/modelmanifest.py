"""`lanes model manifest MODEL --from DIR`: write the model's manifest from a folder that holds its checkpoint.

The manifest (`state/models/<model>.manifest.json`, `reconciler.spec.manifest`) lists every file with
its size and sha256, the safetensors index and the Hugging Face revision; staging copies and verifies
against it. It is written into the state repo's work tree beside the model file, for the person to
review and commit: lanes reads state from commits only.

DIR is a folder on the control node (read here, hashed in threads, progress on stderr). HOST:DIR, a
folder on a fleet origin or host, is hashed there by the host-side model check script over the
reconciler's SSH transport (`reconciler.cli.modelremote`).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from reconciler.cli.byteprogress import ByteProgress, RateMeter, human_bytes, human_seconds
from reconciler.cli.common import err_console, handle_errors
from reconciler.cli.modelhash import (
    find_index,
    hash_folder,
    layout_revision,
    read_index,
    resolve_repo_folder,
    scan_folder,
)
from reconciler.cli.reconcile import DEFAULT_KEY, DEFAULT_KNOWN_HOSTS, JsonOpt, KeyOpt, KnownHostsOpt, RepoOpt
from reconciler.errors import InputError
from reconciler.source.gitread import open_repo
from reconciler.spec.base import NAME_RE
from reconciler.spec.load import YAML_SUFFIXES
from reconciler.spec.manifest import REVISION_RE, Manifest, manifest_of, manifest_path, render_manifest
from reconciler.spec.model import ModelSpec
from reconciler.spec.yamlsrc import parse_yaml, validate

REMOTE_RE = re.compile(r"^(?P<host>[a-z0-9][a-z0-9._-]{0,62}):(?P<path>/.*)$")
"""HOST:/abs/path, as rsync and scp write a remote folder; a local folder with such a name is ./written."""

WEIGHT_TOLERANCE = 0.01
"""How far weight_bytes may sit from the index's total_size before it is worth a warning (1 %)."""


@dataclass
class Written:
    """The manifest `lanes model manifest` wrote, for the summary line and `--json`."""

    manifest: Manifest
    written: str
    seconds: float
    revision_from: str
    warnings: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        m = self.manifest
        return {
            "ok": True,
            "model": m.model,
            "manifest": self.written,
            "files": len(m.files),
            "total_bytes": m.total_bytes,
            "revision": m.revision,
            "revision_from": self.revision_from,
            "index": m.index,
            "seconds": round(self.seconds, 3),
            "rate_bps": round(m.total_bytes / self.seconds) if self.seconds > 0 else None,
            "left_out": self.left_out,
            "warnings": self.warnings,
        }


def work_tree(repo: str) -> Path:
    """The state repo's work tree: the manifest is written there, for a person to commit."""
    found = open_repo(repo)
    if found.workdir is None:
        raise InputError("a bare repository has no work tree to write the manifest into", file=repo, field="--repo")
    return Path(found.workdir)


def read_model(tree: Path, state_dir: str, name: str) -> tuple[ModelSpec, str]:
    """The model file as it is in the work tree (it may not be committed yet), and its repo path."""
    if not NAME_RE.match(name):
        raise InputError(f"'{name}' is not a model name", field="MODEL")
    for suffix in YAML_SUFFIXES:
        rel = f"{state_dir}/models/{name}{suffix}"
        path = tree / rel
        if path.is_file():
            doc = parse_yaml(rel, path.read_bytes())
            return validate(ModelSpec, doc, defaults={"name": name}), rel
    raise InputError(
        f"no model file {state_dir}/models/{name}.yaml in {tree}: write it first (`lanes model describe`)",
        field="MODEL",
    )


def choose_revision(
    layout: tuple[str | None, str], asked: str | None, model: ModelSpec, warnings: list[str]
) -> tuple[str | None, str]:
    """The folder's own record first, then --revision, then the model file's pin."""
    found, how = layout
    if asked is not None and not REVISION_RE.match(asked):
        raise InputError("a revision is the checkpoint's 40-hex commit sha", field="--revision")
    if asked is not None and found is not None and asked != found:
        raise InputError(f"the folder holds revision {found} (from {how}), not {asked}", field="--revision")
    revision, origin = (
        (found, how)
        if found is not None
        else (asked, "--revision")
        if asked is not None
        else (model.revision, "the model file's revision")
    )
    if revision is not None and model.revision is not None and model.revision != revision:
        warnings.append(
            f"the model file pins revision {model.revision} but these files are {revision}: "
            "update `revision:` in the model file, or point --from at the pinned files"
        )
    return revision, origin if revision is not None else "unknown"


def weight_warning(model: ModelSpec, manifest: Manifest, index_total: int | None) -> str | None:
    """weight_bytes is the safetensors index's total_size; say so when the model file disagrees."""
    if index_total is not None:
        if abs(index_total - model.weight_bytes) > WEIGHT_TOLERANCE * index_total:
            return (
                f"weight_bytes is {model.weight_bytes} in the model file but the safetensors index's "
                f"total_size is {index_total}: set weight_bytes: {index_total} (the memory budget counts it)"
            )
        return None
    shards = manifest.safetensors_bytes()
    if shards and (model.weight_bytes > shards or shards - model.weight_bytes > WEIGHT_TOLERANCE * shards):
        return (
            f"weight_bytes is {model.weight_bytes} in the model file but the .safetensors files hold {shards} "
            "bytes (tensors plus small headers): check weight_bytes"
        )
    return None


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def manifest_from_folder(
    model: ModelSpec, source: Path, asked_revision: str | None, workers: int, *, live: bool | None = None
) -> tuple[Manifest, float, str, list[str], list[str]]:
    """Scan, hash and describe a local folder: (manifest, seconds, revision source, warnings, left out)."""
    read = resolve_repo_folder(source)
    folder = scan_folder(read)
    warnings: list[str] = []
    revision, revision_from = choose_revision(layout_revision(source, read), asked_revision, model, warnings)
    index = find_index(folder.files)
    index_summary = read_index(folder, index) if index is not None else None
    meter = RateMeter(folder.total)
    started = time.monotonic()
    with ByteProgress(meter, f"hashing {len(folder.files)} files", sys.stderr, live=live):
        hashed = hash_folder(folder, workers, meter.add)
    seconds = time.monotonic() - started
    try:
        manifest = manifest_of(model.name, revision, index, hashed)
    except ValidationError as exc:  # paths were checked while scanning; this is a bug, said plainly
        raise InputError(f"cannot make a manifest: {exc}", file=str(source)) from None
    problem = weight_warning(model, manifest, index_summary.total_size if index_summary else None)
    if problem:
        warnings.append(problem)
    return manifest, seconds, revision_from, warnings, folder.left_out


@handle_errors
def model_manifest(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="the model's name (state/models/MODEL.yaml)")],
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="the folder holding the checkpoint: DIR on this machine, or HOST:DIR on a fleet origin or host",
        ),
    ],
    repo: RepoOpt = ".",
    state_dir: Annotated[str, typer.Option(help="folder of the state files in the repo")] = "state",
    revision: Annotated[
        str | None, typer.Option("--revision", help="40-hex commit sha, when the folder does not record one")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="files hashed at once")] = min(
        8, os.cpu_count() or 1
    ),
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    as_json: JsonOpt = False,
) -> None:
    """Write state/models/MODEL.manifest.json: every file of the checkpoint with its size and sha256."""
    tree = work_tree(repo)
    spec, _ = read_model(tree, state_dir, model)
    remote = REMOTE_RE.match(source)
    if remote is not None:
        from reconciler.cli.modelremote import manifest_from_host

        manifest, seconds, revision_from, warnings, left_out = manifest_from_host(
            tree, state_dir, spec, remote["host"], remote["path"], revision, workers, known_hosts, ssh_key
        )
    else:
        manifest, seconds, revision_from, warnings, left_out = manifest_from_folder(
            spec, Path(source).expanduser(), revision, workers
        )
    rel = manifest_path(state_dir, model)
    write_atomically(tree / rel, render_manifest(manifest))
    written = Written(manifest, rel, seconds, revision_from, warnings, left_out)
    if as_json:
        print(json.dumps({"ok": True, "exit_code": 0, **written.to_json()}, indent=2))
        return
    for warning in warnings:
        err_console().print(f"[yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
    rate = f", {human_bytes(manifest.total_bytes / seconds)}/s" if seconds > 0 else ""
    print(
        f"wrote {rel}: {len(manifest.files)} files, {human_bytes(manifest.total_bytes)} "
        f"({manifest.total_bytes} bytes), revision {manifest.revision or 'unknown'} ({revision_from}), "
        f"index {manifest.index or 'none'}; hashed in {human_seconds(seconds)}{rate}"
    )
    if left_out:
        print(f"left out: {', '.join(left_out)}")
    print(f"review and commit it: git add {rel}")
