"""`lanes model status`, `lanes model unused`, `lanes model remove`: model files on the hosts.

status: per model and host, present (every file of the manifest verified), partial (files missing or
short, or only rsync's partial bytes), mismatched (a file of the manifest's size with other bytes) or
missing, with the bytes verified and on disk against the manifest's total. Exit 0 when every model is
present everywhere it was checked, 1 when one is not, 4 when a host did not answer.

unused: per host, the folders beside the model paths that the state does not use on that host (no lane
placed there serves it, and it is not the host's origin folder), with their size. remove: removes one
such folder, named by the person, on the hosts they name, only with --yes; a folder the state uses on
one of them, or that a host does not list as unused, is refused and nothing is removed anywhere.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from reconciler.cli import exitcodes
from reconciler.cli.byteprogress import human_bytes
from reconciler.cli.common import EXIT_OK, fail, handle_errors, load_commit
from reconciler.cli.modelhosts import (
    CHECK_TIMEOUT_S,
    HostFolders,
    ModelHostStatus,
    kept_on,
    model_hosts,
    model_parents,
    model_status,
    remove_folder,
    unused_folders,
)
from reconciler.cli.reconcile import DEFAULT_KEY, DEFAULT_KNOWN_HOSTS, JsonOpt, KeyOpt, KnownHostsOpt, RepoOpt, RevOpt
from reconciler.cli.tables import Column, print_table
from reconciler.errors import InputError, RemoteCommandError
from reconciler.spec.load import DesiredState
from reconciler.transport.ssh import SSHTransport

HostsOpt = Annotated[
    list[str] | None, typer.Option("--hosts", help="hosts to ask (comma-separated or repeated; default: see above)")
]


def split_hosts(values: list[str] | None) -> list[str]:
    return sorted({name.strip() for value in values or [] for name in value.split(",") if name.strip()})


def open_transport(known_hosts: Path, key: Path, as_json: bool) -> SSHTransport:
    if not known_hosts.is_file():
        fail(
            f"known_hosts file {known_hosts} not found: pin every host key first (no trust on first use)",
            as_json=as_json,
        )
    return SSHTransport(known_hosts, [key])


# -- status ---------------------------------------------------------------------------------------


def status_pairs(desired: DesiredState, model: str | None, hosts: list[str]) -> list[tuple[str, str]]:
    if model is not None and model not in desired.models:
        raise InputError(f"no model '{model}' in the state (known: {', '.join(sorted(desired.models))})", field="MODEL")
    names = [model] if model is not None else sorted(desired.manifests)
    pairs = []
    for name in names:
        if name not in desired.manifests:
            raise InputError(
                f"model '{name}' has no manifest to check against: "
                f"write it with `lanes model manifest {name} --from DIR`",
                field="MODEL",
            )
        on = hosts or model_hosts(desired, name)
        if not on and model is not None:
            raise InputError(
                f"model '{name}' is on no lane's hosts and has no origin host: name the hosts with --hosts",
                field="--hosts",
            )
        pairs += [(name, host) for host in on]
    return pairs


def _state_text(row: ModelHostStatus) -> str:
    if row.state == "unreachable":
        return f"unreachable: {row.error}"
    counts = ", ".join(f"{n} {state}" for state, n in row.counts.items() if n and state != "ok")
    return row.state + (f" ({counts})" if counts else "")


def render_status(rows: list[ModelHostStatus], console: Console) -> None:
    columns = [
        Column("model", "key"),
        Column("host"),
        Column("verified", "num"),
        Column("on disk", "num"),
        Column("of", "num"),
        Column("free", "num"),
        Column("state", "text"),
    ]
    table = [
        [
            r.model,
            r.host,
            human_bytes(r.verified_bytes),
            human_bytes(r.on_disk_bytes),
            human_bytes(r.total_bytes),
            human_bytes(r.free_bytes) if r.free_bytes is not None else "?",
            _state_text(r),
        ]
        for r in rows
    ]
    styles = [
        "" if r.state == "present" else "red" if r.state in ("mismatched", "unreachable") else "yellow" for r in rows
    ]
    print_table(
        console,
        columns,
        table,
        title="Model files on the hosts (bytes verified and on disk of the manifest's)",
        styles=styles,
    )


@handle_errors
def model_status_cmd(
    model: Annotated[
        str | None, typer.Argument(metavar="MODEL", help="one model (default: every model with a manifest)")
    ] = None,
    hosts: HostsOpt = None,
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="files each host hashes at once")] = 4,
    timeout: Annotated[
        float, typer.Option("--timeout", help="seconds one host may take for one model")
    ] = CHECK_TIMEOUT_S,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    as_json: JsonOpt = False,
) -> None:
    """Per model and host: present, partial, mismatched or missing, against the manifest (exit 1, 4: see below).

    By default each model is checked on every rank host of its lanes and on its origin host. Exit 0 when
    every model is present wherever it was checked, 1 when one is not, 4 when a host did not answer.
    """
    desired = load_commit(repo, rev).desired
    pairs = status_pairs(desired, model, split_hosts(hosts))
    transport = open_transport(known_hosts, ssh_key, as_json)

    async def run() -> list[ModelHostStatus]:
        try:
            return await model_status(desired, transport, pairs, workers=workers, timeout=timeout)
        finally:
            await transport.close()

    rows = asyncio.run(run())
    code = (
        exitcodes.BLOCKED
        if any(r.state == "unreachable" for r in rows)
        else EXIT_OK
        if all(r.state == "present" for r in rows)
        else exitcodes.FAILED
    )
    if as_json:
        print(
            json.dumps(
                {
                    "commit": desired.commit,
                    "ok": code == EXIT_OK,
                    "exit_code": code,
                    "models": [r.to_json() for r in rows],
                },
                indent=2,
            )
        )
    else:
        render_status(rows, Console())
    raise typer.Exit(code)


# -- unused and remove ------------------------------------------------------------------------------


def _folder_model(desired: DesiredState, path: str) -> str | None:
    return next((m.name for m in desired.models.values() if m.path == path), None)


def unused_json(desired: DesiredState, found: list[HostFolders]) -> dict[str, object]:
    return {
        "commit": desired.commit,
        "parents": model_parents(desired),
        "hosts": [
            {
                "host": h.host,
                "error": h.error,
                "folders": [
                    {"path": f.path, "bytes": f.bytes, "model": _folder_model(desired, f.path)} for f in h.folders
                ],
                "absent": list(h.absent),
                "errors": list(h.errors),
            }
            for h in found
        ],
    }


def render_unused(desired: DesiredState, found: list[HostFolders], console: Console) -> None:
    rows, styles = [], []
    for h in found:
        if h.error is not None:
            rows.append([h.host, "", "", f"unreachable: {h.error}"])
            styles.append("red")
            continue
        for f in h.folders:
            owner = _folder_model(desired, f.path)
            note = f"model {owner}'s path; no lane on {h.host} uses it" if owner else "no model file names it"
            rows.append([h.host, f.path, human_bytes(f.bytes), note])
            styles.append("")
    title = f"Folders beside the model paths ({', '.join(model_parents(desired))}) that nothing uses on each host"
    print_table(
        console,
        [Column("host", "key"), Column("folder"), Column("size", "num"), Column("why unused", "text")],
        rows,
        title=title,
        styles=styles,
    )
    if not rows:
        console.print("no unused folders")
    total = sum(f.bytes for h in found for f in h.folders)
    if total:
        console.print(f"{human_bytes(total)} in all; remove one with `lanes model remove NAME --hosts H --yes`")


@handle_errors
def model_unused_cmd(
    hosts: HostsOpt = None,
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    as_json: JsonOpt = False,
) -> None:
    """Folders beside the model paths that no lane on the host uses, with their size (exit 4: a host did not answer)."""
    desired = load_commit(repo, rev).desired
    names = split_hosts(hosts) or sorted(desired.hosts)
    transport = open_transport(known_hosts, ssh_key, as_json)

    async def run() -> list[HostFolders]:
        try:
            return await unused_folders(desired, transport, names)
        finally:
            await transport.close()

    found = asyncio.run(run())
    if as_json:
        print(json.dumps({"ok": True, "exit_code": 0, **unused_json(desired, found)}, indent=2))
    else:
        render_unused(desired, found, Console())
    raise typer.Exit(exitcodes.BLOCKED if any(h.error for h in found) else EXIT_OK)


def resolve_folder(desired: DesiredState, name: str, found: list[HostFolders]) -> str:
    """NAME as an absolute path beside the model paths: given so, or the one folder of that name the hosts list."""
    parents = model_parents(desired)
    if name.startswith("/"):
        if posixpath.normpath(name) != name or posixpath.dirname(name) not in parents:
            raise InputError(f"{name} is not a folder directly in {', '.join(parents)}", field="NAME")
        return name
    if "/" in name or name in ("", ".", ".."):
        raise InputError("give the folder's name or its absolute path", field="NAME")
    candidates = sorted({f.path for h in found for f in h.folders if posixpath.basename(f.path) == name})
    if not candidates and len(parents) == 1:
        candidates = [posixpath.join(parents[0], name)]  # the hosts then say why it is not unused
    if len(candidates) != 1:
        where = ", ".join(candidates) or f"any of {', '.join(parents)}"
        raise InputError(f"'{name}' is not one unused folder ({where}): give its absolute path", field="NAME")
    return candidates[0]


@handle_errors
def model_remove_cmd(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="the folder's name (as `lanes model unused` lists it) or its path")
    ],
    hosts: Annotated[
        list[str], typer.Option("--hosts", help="the hosts to remove it from (comma-separated or repeated)")
    ],
    yes: Annotated[bool, typer.Option("--yes", help="remove without asking (required: there is no undo)")] = False,
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    as_json: JsonOpt = False,
) -> None:
    """Remove one unused model folder from the named hosts (only one `lanes model unused` lists; never one in use)."""
    desired = load_commit(repo, rev).desired
    names = split_hosts(hosts)
    if not names:
        raise InputError("name the hosts to remove it from", field="--hosts")
    unknown = [h for h in names if h not in desired.hosts]
    if unknown:
        raise InputError(f"not fleet hosts: {', '.join(unknown)} (origins keep their folders)", field="--hosts")
    transport = open_transport(known_hosts, ssh_key, as_json)

    async def listing() -> list[HostFolders]:
        return await unused_folders(desired, transport, names)

    async def removing(path: str) -> list[tuple[str, int | None, str | None]]:
        async def one(host: str) -> tuple[str, int | None, str | None]:
            try:
                done = await remove_folder(desired, transport, host, path)
            except RemoteCommandError as exc:
                return host, None, exc.stderr_tail or str(exc)
            return host, done.bytes if done.removed else None, None if done.removed else "; ".join(done.errors)

        return list(await asyncio.gather(*(one(h) for h in names)))

    async def run() -> tuple[str, list[tuple[str, int | None, str | None]]]:
        try:
            found = await listing()
            down = [f"{h.host}: {h.error}" for h in found if h.error]
            if down:
                raise InputError(
                    f"cannot list the folders of every host, nothing removed: {'; '.join(down)}", field="--hosts"
                )
            path = resolve_folder(desired, name, found)
            for h in found:
                why = kept_on(desired, h.host).get(path)
                if why is not None:
                    raise InputError(f"{path} is in use on {h.host}: {why}; nothing removed", field="NAME")
                if path not in {f.path for f in h.folders}:
                    raise InputError(
                        f"{h.host} does not list {path} as an unused folder; nothing removed", field="NAME"
                    )
            if not yes:
                fail(
                    f"would remove {path} from {', '.join(names)}: there is no undo; add --yes to remove it",
                    exitcodes.NOT_CONFIRMED,
                    as_json=as_json,
                )
            return path, await removing(path)
        finally:
            await transport.close()

    path, results = asyncio.run(run())
    failed = [(h, why) for h, _, why in results if why is not None]
    code = exitcodes.FAILED if failed else EXIT_OK
    if as_json:
        rows = [{"host": h, "removed": why is None, "bytes": size, "error": why} for h, size, why in results]
        print(json.dumps({"ok": not failed, "exit_code": code, "path": path, "hosts": rows}, indent=2))
    else:
        for host, size, why in results:
            print(
                f"{host}: removed {path} ({human_bytes(size or 0)})"
                if why is None
                else f"{host}: NOT removed {path}: {why}"
            )
    raise typer.Exit(code)
