"""`lanes schema` and `lanes model describe`: help people write valid state files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from reconciler.cli.common import handle_errors
from reconciler.errors import InputError
from reconciler.policy.report import CheckReport
from reconciler.spec.bench import BenchProfilesFile
from reconciler.spec.fleet import FleetDefaults, Host
from reconciler.spec.lane import Lane
from reconciler.spec.model import ModelSpec
from reconciler.spec.policyfiles import HardwareFile, KnownIssuesFile, RulesFile
from reconciler.spec.upstream import UpstreamsFile
from reconciler.spec.windows import WindowsFile

SCHEMAS: dict[str, type[Any]] = {
    "fleet": FleetDefaults,
    "host": Host,
    "model": ModelSpec,
    "lane": Lane,
    "upstreams": UpstreamsFile,
    "bench-profiles": BenchProfilesFile,
    "hardware": HardwareFile,
    "rules": RulesFile,
    "known-issues": KnownIssuesFile,
    "windows": WindowsFile,
    "check": CheckReport,
}
NAME_FROM_FILE = {"host", "model", "lane"}


def json_schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = SCHEMAS[kind].model_json_schema()
    if kind in NAME_FROM_FILE:
        # The name comes from the file name; the field is optional in the file.
        schema.get("required", []).remove("name") if "name" in schema.get("required", []) else None
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "lanes check --json output" if kind == "check" else f"lanes {kind} file"
    return schema


@handle_errors
def schema(
    out: Annotated[Path, typer.Option("--out", help="folder to write <kind>.schema.json files into")] = Path("schemas"),
    kind: Annotated[str | None, typer.Option("--kind", help="print one kind's schema to stdout")] = None,
) -> None:
    """Write the JSON Schema of every state and policy file kind (for yaml-language-server)."""
    if kind is not None:
        if kind not in SCHEMAS:
            raise InputError(f"unknown kind '{kind}'; one of {', '.join(SCHEMAS)}", field="--kind")
        print(json.dumps(json_schema(kind), indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name in SCHEMAS:
        path = out / f"{name}.schema.json"
        path.write_text(json.dumps(json_schema(name), indent=2) + "\n")
        print(path)


HF_SNAPSHOT = re.compile(r"(?:^|/)models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<sha>[0-9a-f]{40})/?$")
"""A Hugging Face cache snapshot: <cache>/models--<org>--<name>/snapshots/<commit sha>. The folder is the
repo id with "/" as "--" (huggingface_hub file_download.py, repo_folder_name); a repo id never holds "--"
itself (huggingface_hub utils/_validators.py, validate_repo_id), so the split is unambiguous."""


def hf_snapshot(path: Path) -> tuple[str, str] | None:
    """(repo id, commit sha) of a Hugging Face cache snapshot folder, else None."""
    match = HF_SNAPSHOT.search(path.resolve().as_posix()) or HF_SNAPSHOT.search(path.as_posix())
    return (f"{match['org']}/{match['name']}", match["sha"]) if match else None


@handle_errors
def model_describe(
    path: Annotated[Path, typer.Argument(metavar="PATH", help="checkpoint folder with config.json")],
    name: Annotated[
        str | None, typer.Option(help="model name (default: the repo's name, else the folder's, lower-cased)")
    ] = None,
    host_path: Annotated[str | None, typer.Option(help="path of the checkpoint on the hosts (default: PATH)")] = None,
    hf_repo: Annotated[
        str | None, typer.Option("--hf-repo", help="Hugging Face repo id (default: from an HF cache path)")
    ] = None,
    revision: Annotated[
        str | None, typer.Option("--revision", help="40-hex commit sha (default: from an HF cache path)")
    ] = None,
) -> None:
    """Print a model file for state/models/ from a checkpoint's config.json and safetensors index.

    A Hugging Face cache snapshot (.../models--ORG--NAME/snapshots/SHA) gives the repo id and revision.
    """
    from reconciler.spec.checkpoint import model_from_checkpoint, render_model_yaml

    if revision is not None and not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise InputError("a revision is the checkpoint's 40-hex commit sha", field="--revision")
    snapshot = hf_snapshot(path)
    if snapshot is not None:
        hf_repo = hf_repo or snapshot[0]
        revision = revision or snapshot[1]

    config_path = path / "config.json"
    if not config_path.is_file():
        raise InputError("config.json not found in the checkpoint folder", file=str(config_path))
    config = _read_json(config_path)
    index_path = path / "model.safetensors.index.json"
    index = _read_json(index_path) if index_path.is_file() else None
    total = sum(p.stat().st_size for p in path.glob("*.safetensors")) or None
    model_name = name or (hf_repo.split("/")[-1] if hf_repo else path.resolve().name).lower()
    spec, notes = model_from_checkpoint(
        config,
        index,
        name=model_name,
        path=host_path or str(path.resolve()),
        file_bytes_total=total,
        hf_repo=hf_repo,
        revision=revision,
    )
    print(render_model_yaml(spec, notes), end="")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", file=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", file=str(path), line=exc.lineno) from None
