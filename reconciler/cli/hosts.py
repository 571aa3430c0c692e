"""`lanes hosts`: what every host's probe says of it, one block per host, as a Spark operator checks by hand.

One probe per host (the same command `lanes plan` sends), then per host: reachable or why not, OS
and DGX OS, kernel and machine, NVIDIA driver and CUDA, GPU compute processes, memory available,
the network links (the data-plane ports of the fleet state first, each with what the state wants),
the RDMA devices with their RoCE v2 IPv4 GID indexes, /dev/infiniband, disk free under the model and
HF paths, the facts the host could not read, and what keeps a lane off it now
(`reconciler.plan.hostchecks`). Lines wrap at the terminal's width (80 in a pipe) with a hanging
indent: no figure is cut.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer

from reconciler.cli import exitcodes
from reconciler.cli.common import EXIT_OK, fail, handle_errors, load_commit
from reconciler.cli.reconcile import DEFAULT_KEY, DEFAULT_KNOWN_HOSTS, JsonOpt, KeyOpt, KnownHostsOpt, RepoOpt, RevOpt
from reconciler.cli.tables import output_width
from reconciler.execute.cycle import targets_for
from reconciler.facts.hostinfo import HostInfo, NetLink, RdmaDevice
from reconciler.facts.observed import ObservedFleet, ObservedHost
from reconciler.observe.probe import observe
from reconciler.plan.hostchecks import host_problems
from reconciler.spec import Host
from reconciler.spec.load import DesiredState
from reconciler.transport.ssh import SSHTransport

LABEL = 12  # width of the label column
GIB = 1 << 30
NBSP = "\u00a0"  # joins a figure to its unit while wrapping ("200 Gb/s" never splits); a space once printed


def lane_problems(desired: DesiredState, observed: ObservedFleet) -> dict[str, list[tuple[str, str]]]:
    """host -> [(lane, reason)]: what the host facts of this probe keep off each running multi-node lane."""
    out: dict[str, list[tuple[str, str]]] = {}
    for lane in sorted(desired.lanes.values(), key=lambda ln: ln.name):
        if not lane.running:
            continue
        for problem in host_problems(lane.hosts, desired.hosts, observed.hosts, desired.fleet.fabric.mtu):
            out.setdefault(problem.host, []).append((lane.name, problem.message))
    return out


# -- JSON ---------------------------------------------------------------------------------------


def hosts_to_json(desired: DesiredState, observed: ObservedFleet) -> dict[str, Any]:
    problems = lane_problems(desired, observed)
    rows = []
    for name in sorted(observed.hosts):
        seen = observed.hosts[name]
        spec = desired.hosts.get(name)
        rows.append(
            {
                "name": name,
                "address": spec.address if spec else None,
                "reachable": seen.reachable,
                "error": seen.error,
                "hostname": seen.hostname,
                "memory": dataclasses.asdict(seen.memory) if seen.memory else None,
                "data_plane": [p.model_dump() for p in spec.data_plane] if spec else [],
                "info": json.loads(json.dumps(dataclasses.asdict(seen.info))) if seen.info else None,
                "unknown": list(seen.probe_errors),
                "blocks": [{"lane": lane, "reason": why} for lane, why in problems.get(name, [])],
            }
        )
    return {"commit": desired.commit, "hosts": rows, "unreachable": list(observed.unreachable())}


# -- text ---------------------------------------------------------------------------------------


def render_hosts(desired: DesiredState, observed: ObservedFleet, width: int) -> str:
    problems = lane_problems(desired, observed)
    blocks = [
        _block(name, desired.hosts.get(name), observed.hosts[name], problems.get(name, []), width)
        for name in sorted(observed.hosts)
    ]
    return "\n\n".join(blocks) + "\n"


def _block(name: str, spec: Host | None, seen: ObservedHost, blocks: list[tuple[str, str]], width: int) -> str:
    where = f" ({spec.address})" if spec else ""
    if not seen.reachable:
        return _wrap(f"{name}{where}: UNREACHABLE: {seen.error or 'no answer'}", width, 4)
    title = f"{name}{where}: reachable" + (f", hostname {seen.hostname}" if seen.hostname else "")
    lines = [_wrap(title, width, 4)]
    info = seen.info or HostInfo()
    fields: list[tuple[str, str]] = [
        (
            "os",
            "; ".join(v for v in (_s(info.os_release), info.dgx_release.describe() if info.dgx_release else "") if v),
        ),
        ("kernel", f"{_s(info.kernel)} ({_s(info.arch)})"),
        ("gpu", _gpu(info)),
        ("memory", _memory(seen)),
    ]
    fields += [("links" if i == 0 else "", text) for i, text in enumerate(_links(info, spec))]
    fields += [("rdma" if i == 0 else "", text) for i, text in enumerate(_rdma(info, spec))]
    fields.append(("ib devices", _chars(info)))
    fields += [("disk" if i == 0 else "", text) for i, text in enumerate(_disks(info))]
    fields += [("unknown" if i == 0 else "", e) for i, e in enumerate(seen.probe_errors)]
    fields += [("blocks" if i == 0 else "", f"lane {lane}: {why}") for i, (lane, why) in enumerate(blocks)]
    lines += [_field(label, text, width) for label, text in fields]
    return "\n".join(lines)


def _s(value: object) -> str:
    return "unknown" if value is None else str(value)


def _fig(text: str) -> str:
    """A figure and its unit as one word for the wrapper."""
    return text.replace(" ", NBSP)


def _gpu(info: HostInfo) -> str:
    procs = info.gpu_processes
    held = "unknown" if procs is None else (", ".join(str(p) for p in procs) if procs else "none")
    return f"driver {_s(info.driver_version)}, CUDA {_s(info.cuda_version)}, compute processes: {held}"


def _memory(seen: ObservedHost) -> str:
    m = seen.memory
    if m is None:
        return "unknown"
    available, total = _fig(f"{m.available_bytes / GIB:.1f} GiB"), _fig(f"{m.total_bytes / GIB:.1f} GiB")
    return f"{available} available of {total} ({_fig(f'{m.cached_bytes / GIB:.1f} GiB')} page cache)"


def _speed(mbps: int | None) -> str:
    if mbps is None:
        return "no speed"
    return _fig(f"{mbps // 1000} Gb/s" if mbps >= 1000 and mbps % 1000 == 0 else f"{mbps} Mb/s")


def _link_text(lk: NetLink) -> str:
    addrs = ", ".join(lk.ipv4) or "no IPv4"
    mtu = _fig(f"MTU {lk.mtu}" if lk.mtu is not None else "MTU unknown")
    return f"{lk.operstate}, {mtu}, {_speed(lk.speed_mbps)}, {addrs}"


def _links(info: HostInfo, spec: Host | None) -> list[str]:
    """The data-plane ports of the state first (with what the state wants), then every other link but lo."""
    if info.links is None:
        return ["unknown"]
    out = []
    ports = spec.data_plane if spec else ()
    for port in ports:
        lk = info.link(port.interface)
        want = f"[data plane: {port.address}]"
        out.append(f"{port.interface} {want}: " + (_link_text(lk) if lk else "ABSENT"))
    named = {p.interface for p in ports}
    out += [f"{lk.name}: {_link_text(lk)}" for lk in info.links if lk.name not in named and lk.name != "lo"]
    return out or ["none"]


def _rdma_text(d: RdmaDevice) -> str:
    gids = ", ".join(_fig(f"RoCE v2 GID {i}") + f" for {ip}" for ip, i in sorted(d.roce_v2_ipv4_gids.items()))
    state = _fig(d.port_state or "no port state")
    return f"{state}, on {', '.join(d.netdevs) or 'no netdev'}, {gids or 'no RoCE v2 IPv4 GID'}"


def _rdma(info: HostInfo, spec: Host | None) -> list[str]:
    if info.rdma is None:
        return ["unknown"]
    named = {p.hca: p.interface for p in (spec.data_plane if spec else ()) if p.hca}
    out = [
        f"{hca} [data plane: {iface}]: " + (_rdma_text(d) if (d := info.hca(hca)) else "ABSENT")
        for hca, iface in named.items()
    ]
    out += [f"{d.name}: {_rdma_text(d)}" for d in info.rdma if d.name not in named]
    return out or ["none"]


def _chars(info: HostInfo) -> str:
    if info.rdma_char_devices is None:
        return "unknown"
    return " ".join(info.rdma_char_devices) or "none (no /dev/infiniband)"


def _disks(info: HostInfo) -> list[str]:
    out = []
    for path, d in sorted(info.disks.items()):
        at = f" (at {d.measured_at})" if d.measured_at != path else ""
        out.append(f"{path}: {_fig(f'{d.free / GIB:.1f} GiB')} free of {_fig(f'{d.total / GIB:.1f} GiB')}{at}")
    return out or ["unknown"]


def _field(label: str, text: str, width: int) -> str:
    lead = f"  {label:<{LABEL}}"
    filled = textwrap.fill(
        text,
        width=max(width, len(lead) + 20),
        initial_indent=lead,
        subsequent_indent=" " * (len(lead) + 2),
        break_on_hyphens=False,
        break_long_words=False,
    )
    return filled.replace(NBSP, " ")


def _wrap(text: str, width: int, indent: int) -> str:
    return textwrap.fill(
        text, width=max(width, 40), subsequent_indent=" " * indent, break_on_hyphens=False, break_long_words=False
    )


# -- the command --------------------------------------------------------------------------------


async def probe_fleet(
    desired: DesiredState, known_hosts: Path, key: Path, only: frozenset[str] | None, timeout: float = 30.0
) -> ObservedFleet:
    """One probe per host (the same command and path as a reconcile cycle's observation)."""
    transport = SSHTransport(known_hosts, [key])
    targets = targets_for(desired, {})
    if only is not None:
        targets = {n: t for n, t in targets.items() if n in only}
    try:
        return await observe(desired, transport, targets, timeout=timeout)
    finally:
        await transport.close()


@handle_errors
def hosts_cmd(
    repo: RepoOpt = ".",
    rev: RevOpt = "HEAD",
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_key: KeyOpt = DEFAULT_KEY,
    host: Annotated[list[str] | None, typer.Option("--host", help="only this host (repeatable)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Probe every host once and show its facts: OS, driver, links, RDMA, memory, disk (exit 4: one unreachable)."""
    loaded = load_commit(repo, rev)
    desired = loaded.desired
    only = frozenset(host) if host else None
    unknown = sorted((only or frozenset()) - set(desired.hosts))
    if unknown:
        fail(f"no such host in the state: {', '.join(unknown)}", as_json=as_json)
    if not known_hosts.is_file():
        fail(
            f"known_hosts file {known_hosts} not found: pin every host key first (no trust on first use)",
            as_json=as_json,
        )
    observed = asyncio.run(probe_fleet(desired, known_hosts, ssh_key, only))
    code = exitcodes.BLOCKED if observed.unreachable() else EXIT_OK
    if as_json:
        print(json.dumps({"ok": code == EXIT_OK, "exit_code": code, **hosts_to_json(desired, observed)}, indent=2))
    else:
        # Wrapped at the table width ($COLUMNS, the terminal's), 80 in a pipe: blocks of prose, not rows.
        print(render_hosts(desired, observed, output_width() or 80), end="")
    raise typer.Exit(exitcodes.BLOCKED if observed.unreachable() else EXIT_OK)
