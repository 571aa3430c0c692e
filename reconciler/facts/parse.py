"""Turn what the host-side programs printed into `observed` values.

Pure functions of text, so they are tested with recorded outputs
(`tests/facts/cases/*.json`). Output that is not what the probe prints
(not JSON, another probe version, a wrong shape) is a `PermanentError`
naming the host: retrying the same probe against the same host will not fix
it. Facts the host could not read (no docker, no lease file) are not errors
here: the probe reports them in `errors`, kept as `probe_errors`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.equalvalues import EqualValues
from reconciler.errors import PermanentError
from reconciler.facts.hostinfo import HostInfo, HostInfoShapeError, parse_disks, parse_host_info
from reconciler.facts.observed import (
    Lease,
    LeaseOutcome,
    Memory,
    ModelPresence,
    ObservedContainer,
    ObservedHost,
    UnmanagedContainer,
)
from reconciler.facts.probe_digest import fact_digest, stable_view
from reconciler.facts.probe_script import PROBE_VERSION

_KIB = 1024


class _ShapeError(Exception):
    """A field of the probe output has the wrong type (becomes PermanentError)."""


@dataclass(frozen=True, slots=True)
class HeldFacts:
    """What the control node keeps of a host's last whole answer: its digest (`probe_digest`) and the
    host parsed from it, whose stable facts an unchanged answer reuses without parsing them again."""

    digest: str
    host: ObservedHost


def parse_probe(host: str, stdout: str) -> ObservedHost:
    """Parse the probe's JSON (a whole answer) into an `ObservedHost` for `host`."""
    return parse_probe_answer(host, stdout, None)[0]


def parse_probe_answer(
    host: str, stdout: str, held: HeldFacts | None, equal: EqualValues | None = None
) -> tuple[ObservedHost, HeldFacts]:
    """Parse a whole answer, or an unchanged one (digest and volatile figures) against `held`.

    The digest kept is the one computed here from the answer, not the one the host printed: a host
    whose program disagreed would then never be answered "unchanged", which costs bytes, never facts.
    Given `equal` (a long-lived caller's table), the stable facts kept are made of its objects where equal
    ones exist: 1,000 hosts' answers repeat their keys, names, states and texts.
    """
    data = _load(host, stdout)
    try:
        if data.get("unchanged") is True:
            if held is None or data.get("digest") != held.digest:
                raise PermanentError(f"{host}: probe answered 'unchanged' for a digest this control node does not hold")
            return _with_volatile(held.host, data, data.get("disks")), held
        stable = stable_view(data)
        base = _stable_host(host, equal.value(stable) if equal is not None else stable)
        host_section = data.get("host")
        disks = host_section.get("disks") if isinstance(host_section, dict) else None
        return _with_volatile(base, data, disks), HeldFacts(fact_digest(stable), base)
    except _ShapeError as exc:
        raise PermanentError(f"{host}: probe output has a wrong shape: {exc}") from exc


def _load(host: str, stdout: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        head = stdout.strip()[:80]
        raise PermanentError(f"{host}: probe output is not JSON ({exc}): {head!r}") from exc
    if not isinstance(data, dict):
        raise PermanentError(f"{host}: probe output is not a JSON object")
    version = data.get("probe_version")
    if version != PROBE_VERSION:
        raise PermanentError(f"{host}: probe_version {version!r}, expected {PROBE_VERSION}")
    return data


def _with_volatile(base: ObservedHost, data: Mapping[str, Any], disks: object) -> ObservedHost:
    """`base` with the figures that are read afresh every probe (`probe_digest.VOLATILE_KEYS`)."""
    errors = list(base.probe_errors)
    memory = None
    meminfo = data.get("meminfo")
    if isinstance(meminfo, str):
        try:
            memory = parse_meminfo(meminfo)
        except PermanentError as exc:
            errors.append(str(exc))
    disk = data.get("disk")
    if disk is not None and not isinstance(disk, dict):
        raise _ShapeError("disk is not an object")
    info = base.info
    if info is not None:
        try:
            info = dataclasses.replace(info, disks=parse_disks(disks or {}))
        except HostInfoShapeError as exc:
            errors.append(f"host facts: {exc}")
            info = dataclasses.replace(info, disks={})
    return dataclasses.replace(
        base,
        memory=memory,
        disk_free=_opt_int(disk.get("free"), "disk.free") if disk else None,
        disk_total=_opt_int(disk.get("total"), "disk.total") if disk else None,
        probed_at=_opt_float(data.get("time"), "time"),
        info=info,
        probe_errors=tuple(errors),
    )


def _stable_host(host: str, data: Mapping[str, Any]) -> ObservedHost:
    """The host from the digested part of a whole answer; the volatile figures are left empty."""
    errors = [str(e) for e in _list(data, "errors")]
    lease_raw = data.get("lease")
    lease = None
    if lease_raw is not None:
        try:
            lease = _lease(lease_raw)
        except _ShapeError as exc:
            # A mangled lease file must not hide the rest of the host.
            errors.append(f"lease: {exc}")
    info: HostInfo | None = None
    if data.get("host") is not None:
        try:
            info = parse_host_info(data["host"])
        except HostInfoShapeError as exc:
            # Like a mangled lease: the host facts are lost, the containers and models are not.
            errors.append(f"host facts: {exc}")
    models_raw = data.get("models") or {}
    if not isinstance(models_raw, dict):
        raise _ShapeError("models is not an object")
    return ObservedHost(
        host=host,
        reachable=True,
        error=None,
        containers=tuple(_container(c) for c in _list(data, "containers")),
        unmanaged=tuple(_unmanaged(c) for c in _list(data, "unmanaged")),
        listening=frozenset(_int(p, "listening port") for p in _list(data, "listening")),
        memory=None,
        disk_free=None,
        disk_total=None,
        models={str(path): _model(path, m) for path, m in models_raw.items()},
        lease=lease,
        probe_errors=tuple(errors),
        hostname=_opt_str(data.get("hostname")),
        probed_at=None,
        info=info,
    )


def parse_meminfo(text: str) -> Memory:
    """Parse /proc/meminfo (values in kB) into bytes."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and fields and fields[0].isdigit():
            scale = _KIB if fields[1:2] == ["kB"] else 1
            values[key.strip()] = int(fields[0]) * scale
    if "MemTotal" not in values:
        raise PermanentError("meminfo: no MemTotal line")
    if "MemAvailable" not in values:
        # Kernels before 3.14 lack it; no Spark does, so this is not meminfo.
        raise PermanentError("meminfo: no MemAvailable line")
    return Memory(
        total_bytes=values["MemTotal"],
        available_bytes=values["MemAvailable"],
        cached_bytes=values.get("Cached", 0),
        free_bytes=values.get("MemFree"),
    )


def parse_lease_output(stdout: str) -> LeaseOutcome:
    """Parse the lease command's one line of JSON."""
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        raise PermanentError(f"lease output is not JSON: {stdout.strip()[:80]!r}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        raise PermanentError(f"lease output has no boolean 'ok': {stdout.strip()[:80]!r}")
    raw = data.get("lease")
    try:
        lease = _lease(raw) if raw is not None else None
    except _ShapeError as exc:
        raise PermanentError(f"lease output: {exc}") from exc
    return LeaseOutcome(ok=data["ok"], lease=lease)


def _lease(raw: object) -> Lease:
    if not isinstance(raw, dict):
        raise _ShapeError("lease is not an object")
    owner = raw.get("owner")
    if not isinstance(owner, str):
        raise _ShapeError("lease has no owner")
    return Lease(
        owner=owner,
        acquired=_float(raw.get("acquired"), "lease.acquired"),
        expires=_float(raw.get("expires"), "lease.expires"),
    )


def _container(raw: object) -> ObservedContainer:
    if not isinstance(raw, dict):
        raise _ShapeError("a container is not an object")
    labels = raw.get("labels") or {}
    if not isinstance(labels, dict):
        raise _ShapeError(f"labels of container {raw.get('name')!r} are not an object")
    return ObservedContainer(
        name=str(raw.get("name") or ""),
        id=str(raw.get("id") or ""),
        image=str(raw.get("image") or ""),
        image_id=str(raw.get("image_id") or ""),
        state=str(raw.get("state") or ""),
        exit_code=_opt_int(raw.get("exit_code"), "exit_code"),
        labels={str(k): str(v) for k, v in labels.items()},
        started_at=_opt_str(raw.get("started_at")),
    )


def _unmanaged(raw: object) -> UnmanagedContainer:
    if not isinstance(raw, dict):
        raise _ShapeError("an unmanaged container is not an object")
    return UnmanagedContainer(
        name=str(raw.get("name") or ""),
        image=str(raw.get("image") or ""),
        state=str(raw.get("state") or ""),
    )


def _model(path: object, raw: object) -> ModelPresence:
    if not isinstance(raw, dict):
        raise _ShapeError(f"model {path!r} is not an object")
    return ModelPresence(exists=bool(raw.get("exists")), bytes=_int(raw.get("bytes", 0), f"model {path}"))


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _ShapeError(f"{key} is not a list")
    return value


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _ShapeError(f"{what} is not an integer: {value!r}")
    return value


def _opt_int(value: object, what: str) -> int | None:
    return None if value is None else _int(value, what)


def _float(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _ShapeError(f"{what} is not a number: {value!r}")
    return float(value)


def _opt_float(value: object, what: str) -> float | None:
    return None if value is None else _float(value, what)


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
