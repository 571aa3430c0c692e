"""`lanes model manifest MODEL --from HOST:DIR`: the manifest of a folder on a fleet origin (a NAS) or host.

The folder is hashed where it is, by the host-side model check script in its hash mode
(`reconciler.facts.modelcheck`, one SSH command with the reconciler's key and pinned host keys): the
control node never reads 250 GB over the network to learn their checksums. The script's stamp cache
spares a second run the hashing. Its safetensors index is then read with `head -c` to check that
every shard it maps is in the folder and to compare its total_size with the model file's weight_bytes.

Hosts and origins are read from the work tree's fleet and host files (like the model file): the model
may have just been given an `origin:` that HEAD cannot load without the manifest this writes.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from reconciler.cli.byteprogress import human_seconds
from reconciler.cli.modelhash import find_index, index_summary, left_out
from reconciler.cli.modelmanifest import choose_revision, weight_warning
from reconciler.cli.schema import HF_SNAPSHOT
from reconciler.errors import InputError
from reconciler.facts.modelcheck import TreeHash, hash_input, modelcheck_argv, parse_tree_hash
from reconciler.facts.modelfolders import head_argv
from reconciler.spec.fleet import FleetDefaults, Host
from reconciler.spec.manifest import Manifest, manifest_of, path_problem
from reconciler.spec.model import ModelSpec
from reconciler.spec.yamlsrc import parse_yaml, validate
from reconciler.transport.base import HostTarget
from reconciler.transport.ssh import SSHTransport

HASH_TIMEOUT_S = 4 * 3600.0
"""Hashing a 250 GB checkpoint on a NAS of spinning disks (~150-250 MB/s) takes 20-30 minutes; 4 h leaves
room for a slower one without hanging forever on a host that stopped answering."""

BENIGN = ("stamp ", "statvfs ")
"""Errors of the script that do not touch the listing: a read-only folder cannot keep the stamp cache."""


def target_in_tree(tree: Path, state_dir: str, name: str) -> HostTarget:
    """A fleet host (state/hosts/NAME.yaml) or an origin of state/fleet.yaml, as the work tree has them."""
    fleet_rel = f"{state_dir}/fleet.yaml"
    fleet_file = tree / fleet_rel
    if not fleet_file.is_file():
        raise InputError(f"missing {fleet_rel}: every state repo needs fleet defaults", file=fleet_rel)
    fleet = validate(FleetDefaults, parse_yaml(fleet_rel, fleet_file.read_bytes()))
    origin = fleet.origin(name)
    if origin is not None:
        return HostTarget(name, origin.address, origin.ssh_port(fleet), origin.ssh_user(fleet))
    for suffix in (".yaml", ".yml"):
        rel = f"{state_dir}/hosts/{name}{suffix}"
        if (tree / rel).is_file():
            host = validate(Host, parse_yaml(rel, (tree / rel).read_bytes()), defaults={"name": name})
            return HostTarget(name, host.address, host.ssh_port(fleet), host.ssh_user(fleet))
    raise InputError(
        f"'{name}' is neither an origin of {fleet_rel}'s `origins:` nor a host of {state_dir}/hosts/", field="--from"
    )


async def _hash_remote(
    target: HostTarget, root: str, workers: int, known_hosts: Path, key: Path
) -> tuple[TreeHash, str | None]:
    """The host's listing of every file with its sha256, and its safetensors index text (if any)."""
    transport = SSHTransport(known_hosts, [key])
    try:
        result = await transport.run(
            target, modelcheck_argv(), input=hash_input(root, workers=workers), timeout=HASH_TIMEOUT_S, check=True
        )
        try:
            listing = parse_tree_hash(result.stdout)
        except ValueError as exc:
            raise InputError(f"{target.name}: the model check's answer is not usable: {exc}", field="--from") from None
        index = find_index(f.path for f in listing.files if not left_out(f.path))
        text = None
        if index is not None:
            read = await transport.run(target, head_argv(f"{root.rstrip('/')}/{index}"), timeout=60.0, check=True)
            text = read.stdout
        return listing, text
    finally:
        await transport.close()


def manifest_from_host(
    tree: Path,
    state_dir: str,
    model: ModelSpec,
    host: str,
    root: str,
    asked_revision: str | None,
    workers: int,
    known_hosts: Path,
    key: Path,
) -> tuple[Manifest, float, str, list[str], list[str]]:
    """Hash HOST:ROOT there: (manifest, seconds, revision source, warnings, left out)."""
    target = target_in_tree(tree, state_dir, host)
    if not known_hosts.is_file():
        raise InputError(
            f"known_hosts file {known_hosts} not found: pin the host keys first (no trust on first use)",
            field="--known-hosts",
        )
    print(f"hashing {host}:{root} on {host} (the host reports when it is done)...", file=sys.stderr, flush=True)
    started = time.monotonic()
    # A host that does not answer or a command that fails is not bad input: its error (naming the host, the
    # command and what it said) ends the command with exit 1.
    listing, index_text = asyncio.run(_hash_remote(target, root, workers, known_hosts, key))
    seconds = time.monotonic() - started
    print(f"hashed on {host} in {human_seconds(seconds)}", file=sys.stderr, flush=True)
    if not listing.exists:
        raise InputError(f"{host} has no folder {root}", field="--from")
    warnings = [e for e in listing.errors if e.startswith(BENIGN)]
    broken = [e for e in listing.errors if not e.startswith(BENIGN)]
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise InputError(f"{host}:{root}: files that cannot be read or are not regular files: {shown}", field="--from")
    files: dict[str, tuple[int, str]] = {}
    dropped: set[str] = set()
    for f in listing.files:
        if left_out(f.path):
            top = f.path.split("/")[0]
            dropped.add(".cache/huggingface/" if f.path.startswith(".cache/huggingface/") else f"{top}/")
            continue
        problem = path_problem(f.path)
        if problem is not None:
            raise InputError(f"{host}:{root}/{f.path}: this file's name {problem}", field="--from")
        files[f.path] = (f.size, f.sha256)
    if not files:
        raise InputError(f"{host}:{root} holds no files", field="--from")
    snapshot = HF_SNAPSHOT.search(root.rstrip("/"))
    layout = (snapshot["sha"], "the snapshot folder's name") if snapshot else (None, "")
    revision, revision_from = choose_revision(layout, asked_revision, model, warnings)
    index = find_index(files)
    summary = index_summary(index_text or "", index, files, f"{host}:{root}/{index}") if index is not None else None
    manifest = manifest_of(model.name, revision, index, files)
    problem = weight_warning(model, manifest, summary.total_size if summary else None)
    if problem:
        warnings.append(problem)
    return manifest, seconds, revision_from, warnings, sorted(dropped)
