"""`lanes model sync MODEL`: stage a model on its hosts ahead of a change, as the lane transaction would.

The lane transaction stages a model before anything stops; this does the same copy on its own, so a
252 GB checkpoint is on every Spark (checked, byte for byte against its manifest) before the commit that
needs it lands, and the change's downtime is the engine's load alone. Hosts: every host of every lane
that serves the model (default), or `--hosts`. Copies go from the model's `origin:` with rsync over ssh,
the reconciler's key and pinned known_hosts; Sparks that hold the model feed the others over their data
plane. Progress (bytes, rate, time left per host) on stderr; `--json` prints the report.

Exit 0 when every host holds the model, 1 when staging failed (the host and file are named), 4 when a
host did not answer or a link was cut (run it again: rsync's partial files are used).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer

from reconciler.cli import exitcodes
from reconciler.cli.common import EXIT_OK, handle_errors, load_commit
from reconciler.cli.modelhosts import reach
from reconciler.cli.models import HostsOpt, open_transport, split_hosts
from reconciler.cli.reconcile import (
    DEFAULT_KEY,
    DEFAULT_KNOWN_HOSTS,
    JsonOpt,
    KeyOpt,
    KnownHostsOpt,
    OriginRootOpt,
    RepoOpt,
    RevOpt,
    local_origins,
)
from reconciler.errors import InputError
from reconciler.execute.hostops import HostOps
from reconciler.execute.stagestep import allowed_local, stage_hosts
from reconciler.execute.stagetypes import CONTROL_NODE
from reconciler.execute.staging import StageProgress, StageReport, StagingError, stage
from reconciler.plan.planner import stage_step
from reconciler.plan.steps import StageModel
from reconciler.spec.load import DesiredState


def sync_step(desired: DesiredState, model: str, hosts: list[str]) -> StageModel:
    """What `model` is staged as on `hosts` (default: every host of every lane serving it)."""
    spec = desired.models.get(model)
    if spec is None:
        known = ", ".join(sorted(desired.models)) or "none"
        raise InputError(f"no model {model} in the state (known: {known})", field="MODEL")
    users = [lane for lane in desired.lanes.values() if lane.model == model]
    if spec.origin is None or model not in desired.manifests:
        what = "an origin:" if spec.origin is None else "a manifest (lanes model manifest)"
        raise InputError(f"model {model} has no {what}: there is nothing to stage it from", field="MODEL")
    if not users and not hosts:
        raise InputError(f"no lane serves model {model}: name the hosts to stage it on with --hosts", field="--hosts")
    base = stage_step(users[0], desired) if users else None
    lane_hosts = [h for lane in users for h in lane.hosts]
    targets = tuple(dict.fromkeys(hosts or lane_hosts))
    unknown = [h for h in targets if h not in desired.hosts]
    if unknown:
        raise InputError(f"not fleet hosts: {', '.join(unknown)} (models are staged onto Sparks)", field="--hosts")
    if base is not None:
        return StageModel(base.model, base.path, targets, base.origin, base.manifest, base.data_plane)
    spark = spec.origin.host is not None and spec.origin.host in desired.hosts
    data = tuple((h, s.data_plane[0].address.split("/")[0]) for h, s in desired.hosts.items() if s.data_plane)
    origin = (spec.origin.host, spec.origin.path, spark)
    return StageModel(model, spec.path, targets, origin, desired.manifests[model], data)


def _progress(p: StageProgress) -> None:
    eta = "" if p.eta_s is None else f", {p.eta_s:.0f} s left"
    done, total = p.bytes_done / 1e9, p.bytes_total / 1e9
    print(f"{p.host}: {done:,.2f} of {total:,.2f} GB, {p.rate_bps / 1e6:,.0f} MB/s{eta}", file=sys.stderr)


def report_json(report: StageReport) -> dict[str, object]:
    return {
        "model": report.model,
        "seconds": round(report.seconds, 3),
        "sent_by": dict(report.sent_by),
        "received_by": dict(report.received_by),
        "copied": {h: list(files) for h, files in report.copied.items()},
        "hosts": sorted(report.checks),
    }


@handle_errors
def model_sync_cmd(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="the model to stage (a model file's name)")],
    hosts: HostsOpt = None,
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=64, help="rsync processes into one host")] = 4,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    as_json: JsonOpt = False,
    origin_root: OriginRootOpt = None,
) -> None:
    """Stage MODEL on its lanes' hosts (or --hosts) from its origin, ahead of a change (exit 1, 4: see below).

    Exit 0 when every host holds the model as its manifest says, 1 when staging failed, 4 when a host did
    not answer or a copy was cut off (run it again: what was copied is kept).
    """
    desired = load_commit(repo, rev).desired
    step = sync_step(desired, model, split_hosts(hosts))
    names = [*step.hosts, *([step.origin[0]] if step.origin[0] else [])]
    transport = open_transport(known_hosts, ssh_key, as_json)

    async def run() -> StageReport:
        try:
            ops = HostOps(transport, reach(desired, names))
            receivers, origin = stage_hosts(step, ops)
            if origin.name == CONTROL_NODE:
                origin = allowed_local(origin, local_origins(origin_root, ssh_key, known_hosts), step)
            return await stage(
                receivers,
                step.model,
                step.manifest,
                origin,
                key=ssh_key,
                known_hosts=known_hosts,
                transport=transport,
                parallel=parallel,
                progress=_progress,
            )
        finally:
            await transport.close()

    try:
        report = asyncio.run(run())
    except StagingError as exc:
        code = exitcodes.BLOCKED if exc.transient else exitcodes.FAILED
        if as_json:
            print(json.dumps({"ok": False, "exit_code": code, "error": str(exc), "host": exc.host, "file": exc.file}))
        else:
            print(f"lanes model sync: {exc}", file=sys.stderr)
        raise typer.Exit(code) from None
    if as_json:
        print(json.dumps({"ok": True, "exit_code": EXIT_OK, **report_json(report)}, indent=2))
    else:
        copied = sum(len(files) for files in report.copied.values())
        sent = sum(report.sent_by.values()) / 1e9
        print(
            f"model {report.model} on {', '.join(sorted(report.checks))}: {copied} file(s) copied, "
            f"{sent:,.2f} GB sent, {report.seconds:.1f} s"
        )
    raise typer.Exit(EXIT_OK)
