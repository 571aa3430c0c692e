"""Recorded host outputs (tests/facts/cases/*.json) against what the parsers make of them.

Each case holds the text a host printed (`stdout`, or `output`: a JSON value
serialised as the probe would) and either the expected fields or the error
message the parser must raise. The `docker-inspect` and `docker-image-inspect`
cases are real outputs of docker and of podman (the rig's runtime), each with
a `source` saying where and how it was recorded and `argv`/`how` saying what
produced it; `tests/facts/test_docker.py` also runs them through the probe
program and the executor's host operations, `test_docker_sim.py` through the
simulator.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import PermanentError
from reconciler.facts.docker import (
    DockerOutputError,
    container_state,
    has_digest,
    parse_image_inspect,
    parse_inspect,
)
from reconciler.facts.hostinfo import HostInfo
from reconciler.facts.observed import ObservedContainer, ObservedHost
from reconciler.facts.parse import parse_lease_output, parse_meminfo, parse_probe

pytestmark = pytest.mark.timeout(60)

CASES = sorted((Path(__file__).parent / "cases").glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text())
    if "output" in case:
        case["stdout"] = json.dumps(case["output"])
    return case


def _container(c: ObservedContainer) -> dict[str, Any]:
    return {
        "name": c.name,
        "lane": c.lane,
        "rank": c.rank,
        "spec_hash": c.spec_hash,
        "commit": c.commit,
        "running": c.running,
        "managed": c.managed,
        "exit_code": c.exit_code,
        "image": c.image,
    }


def _host(h: ObservedHost) -> dict[str, Any]:
    return {
        "reachable": h.reachable,
        "hostname": h.hostname,
        "probed_at": h.probed_at,
        "containers": [_container(c) for c in h.containers],
        "unmanaged": [asdict(u) for u in h.unmanaged],
        "listening": sorted(h.listening),
        "memory": asdict(h.memory) if h.memory else None,
        "disk_free": h.disk_free,
        "disk_total": h.disk_total,
        "models": {p: asdict(m) for p, m in h.models.items()},
        "lease": asdict(h.lease) if h.lease else None,
        "probe_errors": list(h.probe_errors),
        "info": _info(h.info),
    }


def _info(info: HostInfo | None) -> dict[str, Any] | None:
    """The host facts as JSON values (tuples as lists), so a case states them as the probe's JSON does."""
    return None if info is None else json.loads(json.dumps(asdict(info)))


def _inspected(c: ObservedContainer) -> dict[str, Any]:
    return _container(c) | {"id": c.id, "state": c.state, "image_id": c.image_id, "started_at": c.started_at}


def _parse(case: dict[str, Any]) -> dict[str, Any]:
    kind = case["kind"]
    if kind == "docker-inspect":
        return {
            "containers": [_inspected(c) for c in parse_inspect(case["stdout"])],
            "state": container_state(case["stdout"]),
        }
    if kind == "docker-image-inspect":
        images = parse_image_inspect(case["stdout"])
        pinned = case["argv"][-1]
        return {
            "ids": [i.id for i in images],
            "repo_tags": [list(i.repo_tags) for i in images],
            "repo_digests": [list(i.repo_digests) for i in images],
            "has_digest": has_digest(images, pinned.rsplit("@", 1)[1]),
        }
    if kind == "probe":
        return _host(parse_probe(case["host"], case["stdout"]))
    if kind == "meminfo":
        return asdict(parse_meminfo(case["stdout"]))
    if kind == "lease":
        outcome = parse_lease_output(case["stdout"])
        return {"ok": outcome.ok, "lease": asdict(outcome.lease) if outcome.lease else None}
    raise AssertionError(f"unknown case kind {kind!r}")


def test_there_are_cases() -> None:
    assert len(CASES) >= 10


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case(path: Path) -> None:
    case = _load(path)
    if "raises" in case:
        with pytest.raises((PermanentError, DockerOutputError)) as info:
            _parse(case)
        assert case["raises"] in str(info.value)
        return
    got = _parse(case)
    expected = case["expected"]
    assert {k: got[k] for k in expected} == expected


def test_gb10_meminfo_is_about_119_gib() -> None:
    memory = parse_meminfo(_load(Path(__file__).parent / "cases" / "meminfo_gb10.json")["stdout"])
    assert 118 * 2**30 < memory.total_bytes < 120 * 2**30
    assert memory.free_bytes is not None
    assert memory.available_bytes > memory.free_bytes
