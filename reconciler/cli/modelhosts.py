"""What each host holds of each model, and the model folders nothing uses: asked over SSH, hosts in parallel.

`model_status` runs the host-side model check (`reconciler.facts.modelcheck`) once per host per model
against the model's manifest and sums it up per host: present (every file verified), partial,
mismatched (a file of the right size with other bytes) or missing. `unused_folders` asks every host
once for the folders beside the model paths that the state does not use there
(`reconciler.facts.modelfolders`), and `remove_folder` removes one that a person named, after the
host checks again. A host that does not answer is a row that says so, never an exception.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.errors import InputError, LanesError
from reconciler.execute.cycle import targets_for
from reconciler.facts.modelcheck import ModelCheck, check_input, modelcheck_argv, parse_model_check
from reconciler.facts.modelfolders import (
    Folder,
    FolderListing,
    Removal,
    list_input,
    modelfolders_argv,
    parse_listing,
    parse_removal,
    remove_input,
)
from reconciler.spec.load import DesiredState
from reconciler.spec.manifest import Manifest
from reconciler.transport.base import HostTarget, Transport

CHECK_TIMEOUT_S = 3600.0
"""A first check hashes every file: 250 GB at a Spark's ~2 GB/s of NVMe reads is about two minutes, a NAS
on spinning disks may take half an hour; later checks trust the host's stamp cache and take seconds."""

LIST_TIMEOUT_S = 300.0
"""Listing stats every file under the folders beside the models: thousands of files, seconds."""


def reach(desired: DesiredState, names: Iterable[str]) -> dict[str, HostTarget]:
    """How to reach each named fleet host or origin (the same user and port rules as the reconciler)."""
    hosts = targets_for(desired, {})
    out: dict[str, HostTarget] = {}
    for name in names:
        if name in hosts:
            out[name] = hosts[name]
            continue
        origin = desired.fleet.origin(name)
        if origin is None:
            known = ", ".join(sorted([*hosts, *(o.name for o in desired.fleet.origins)])) or "none"
            raise InputError(f"'{name}' is neither a fleet host nor an origin (known: {known})", field="--hosts")
        out[name] = HostTarget(
            name=name,
            address=origin.address,
            port=origin.ssh_port(desired.fleet),
            user=origin.ssh_user(desired.fleet),
        )
    return out


# -- status ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelHostStatus:
    """One model on one host: the check's answer summed up, or why there is none."""

    model: str
    host: str
    root: str
    total_bytes: int
    files: int
    state: str
    """present, partial, mismatched, missing, or unreachable (the host did not answer the check)."""
    verified_bytes: int = 0
    """Bytes of the files whose size and sha256 are the manifest's."""
    on_disk_bytes: int = 0
    """Bytes of the manifest's files on disk, verified or not, plus rsync's partial bytes."""
    counts: Mapping[str, int] = field(default_factory=dict)
    """ok / partial / mismatch / missing: how many files are in each state."""
    not_ok: Mapping[str, str] = field(default_factory=dict)
    """path -> state of every file that is not ok."""
    free_bytes: int | None = None
    error: str | None = None
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "host": self.host,
            "root": self.root,
            "state": self.state,
            "verified_bytes": self.verified_bytes,
            "on_disk_bytes": self.on_disk_bytes,
            "total_bytes": self.total_bytes,
            "files": self.files,
            "counts": dict(self.counts),
            "not_ok": dict(self.not_ok),
            "free_bytes": self.free_bytes,
            "error": self.error,
            "errors": list(self.errors),
        }


def summarize(model: str, host: str, manifest: Manifest, check: ModelCheck) -> ModelHostStatus:
    sizes = {f.path: f.size for f in manifest.files}
    counts = dict.fromkeys(("ok", "partial", "mismatch", "missing"), 0)
    not_ok: dict[str, str] = {}
    verified = on_disk = 0
    for path, size in sizes.items():
        seen = check.files.get(path)
        state = seen.state if seen is not None else "missing"
        counts[state] += 1
        if seen is not None:
            on_disk += seen.size + seen.partial_bytes
        if state == "ok":
            verified += size
        else:
            not_ok[path] = state
    if not not_ok:
        overall = "present"
    elif counts["mismatch"]:
        overall = "mismatched"
    elif on_disk == 0:
        overall = "missing"
    else:
        overall = "partial"
    return ModelHostStatus(
        model=model,
        host=host,
        root=check.root,
        total_bytes=manifest.total_bytes,
        files=len(manifest.files),
        state=overall,
        verified_bytes=verified,
        on_disk_bytes=on_disk,
        counts=counts,
        not_ok=dict(sorted(not_ok.items())),
        free_bytes=check.free_bytes,
        errors=check.errors,
    )


def model_root(desired: DesiredState, model: str, host: str) -> str:
    """Where `host` keeps the model: its origin folder on the origin host, else the model's path."""
    spec = desired.models[model]
    if spec.origin is not None and spec.origin.host == host and spec.origin.path is not None:
        return spec.origin.path
    return spec.path


def model_hosts(desired: DesiredState, model: str) -> list[str]:
    """Every rank host of a lane that serves the model (running or stopped), then its origin host."""
    hosts = sorted({h for lane in desired.lanes.values() if lane.model == model for h in lane.hosts})
    spec = desired.models[model]
    if spec.origin is not None and spec.origin.host is not None and spec.origin.host not in hosts:
        hosts.append(spec.origin.host)
    return hosts


async def check_model_on(
    transport: Transport,
    target: HostTarget,
    model: str,
    root: str,
    manifest: Manifest,
    *,
    workers: int = 4,
    timeout: float = CHECK_TIMEOUT_S,
) -> ModelHostStatus:
    """One model check on one host (one SSH command)."""
    files = [(f.path, f.size, f.sha256) for f in manifest.files]
    try:
        result = await transport.run(
            target, modelcheck_argv(), input=check_input(root, files, workers=workers), timeout=timeout, check=True
        )
        return summarize(model, target.name, manifest, parse_model_check(result.stdout))
    except (LanesError, ValueError) as exc:
        return ModelHostStatus(
            model=model,
            host=target.name,
            root=root,
            total_bytes=manifest.total_bytes,
            files=len(manifest.files),
            state="unreachable",
            error=str(exc),
        )


async def model_status(
    desired: DesiredState,
    transport: Transport,
    pairs: Sequence[tuple[str, str]],
    *,
    workers: int = 4,
    timeout: float = CHECK_TIMEOUT_S,
) -> list[ModelHostStatus]:
    """Check each (model, host) pair: one command per pair, a host's models one after another, hosts in
    parallel. Every model must have a manifest; hosts are fleet hosts or origins."""
    targets = reach(desired, {host for _, host in pairs})
    by_host: dict[str, list[str]] = {}
    for model, host in pairs:
        by_host.setdefault(host, []).append(model)

    async def one_host(host: str) -> list[ModelHostStatus]:
        out = []
        for model in by_host[host]:
            root = model_root(desired, model, host)
            status = await check_model_on(
                transport, targets[host], model, root, desired.manifests[model], workers=workers, timeout=timeout
            )
            out.append(status)
        return out

    found = await asyncio.gather(*(one_host(h) for h in sorted(by_host)))
    rows = [row for rows in found for row in rows]
    return sorted(rows, key=lambda r: (r.model, r.host))


# -- unused folders -------------------------------------------------------------------------------


def model_parents(desired: DesiredState) -> list[str]:
    """The folders that hold model folders: the parent of every model's path."""
    return sorted({posixpath.dirname(m.path) for m in desired.models.values()})


def kept_on(desired: DesiredState, host: str) -> dict[str, str]:
    """Folders the state uses on `host`, each with why: a lane placed there, or the host as an origin."""
    kept: dict[str, str] = {}
    for lane in sorted(desired.lanes.values(), key=lambda ln: ln.name):
        model = desired.models.get(lane.model)
        if model is not None and host in lane.hosts:
            kept.setdefault(model.path, f"lane {lane.name} serves model {model.name} from it")
    for model in desired.models.values():
        if model.origin is not None and model.origin.host == host:
            kept.setdefault(model.origin.path or model.path, f"it is model {model.name}'s origin")
    return kept


@dataclass(frozen=True)
class HostFolders:
    """A host's unused folders, or why it did not say."""

    host: str
    folders: tuple[Folder, ...] = ()
    absent: tuple[str, ...] = ()
    error: str | None = None
    errors: tuple[str, ...] = ()


async def list_unused(
    transport: Transport, target: HostTarget, parents: Sequence[str], keep: Iterable[str], timeout: float
) -> HostFolders:
    try:
        result = await transport.run(
            target, modelfolders_argv(), input=list_input(parents, keep), timeout=timeout, check=True
        )
        listing: FolderListing = parse_listing(result.stdout)
    except (LanesError, ValueError) as exc:
        return HostFolders(target.name, error=str(exc))
    kept = set(keep)
    folders = tuple(f for f in listing.folders if f.path not in kept)  # the host was told; checked again here
    return HostFolders(target.name, folders, listing.absent, errors=listing.errors)


async def unused_folders(
    desired: DesiredState, transport: Transport, hosts: Sequence[str], *, timeout: float = LIST_TIMEOUT_S
) -> list[HostFolders]:
    """One listing per host, hosts in parallel."""
    targets = reach(desired, hosts)
    parents = model_parents(desired)
    found = await asyncio.gather(
        *(list_unused(transport, targets[h], parents, kept_on(desired, h), timeout) for h in sorted(hosts))
    )
    return list(found)


async def remove_folder(
    desired: DesiredState, transport: Transport, host: str, path: str, *, timeout: float = LIST_TIMEOUT_S
) -> Removal:
    """Remove one folder the host listed as unused; the host refuses anything else (RemoteCommandError)."""
    target = reach(desired, [host])[host]
    payload = remove_input(path, model_parents(desired), kept_on(desired, host))
    result = await transport.run(target, modelfolders_argv(), input=payload, timeout=timeout, check=True)
    return parse_removal(result.stdout)
