"""Build desired states and policy sets for policy tests (and for anyone else's tests).

Two ways in: the repository's own files (`repo_files`, `repo_state`,
`repo_policies`), loaded through the real loaders exactly as `lanes check`
does, and small states made from pydantic objects (`host`, `model`, `lane`,
`state`) with every default pinned and valid, so a test only says what is
special about its case.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reconciler.spec.fleet import ContainerContract, DataPort, FleetDefaults, Host
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies
from reconciler.spec.model import Architecture, ModelSpec, MoE
from reconciler.spec.policyfiles import Figure, HardwareFile, HardwareProfile, RuleConfig, RulesFile

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30
SHA = "0123456789abcdef0123456789abcdef01234567"
DIGEST = "sha256:" + "ab" * 32


def repo_files(root: Path = REPO, folders: Iterable[str] = ("state", "policies")) -> dict[str, bytes]:
    """The files under `folders` of a checkout, as the git layer would hand them over."""
    out: dict[str, bytes] = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and path.suffix in {".yaml", ".yml"}:
                out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def repo_state(commit: str = "test") -> DesiredState:
    return load_desired(repo_files(), commit)


def repo_policies() -> PolicySet:
    return load_policies(repo_files())


def host(name: str, hardware: str = "gb10") -> Host:
    """A Spark on the one switch every test host shares (a stable data-plane address per name)."""
    n = zlib.crc32(name.encode()) % 65000 + 1
    port = DataPort(interface="enp1s0f0np0", address=f"10.99.{n // 256}.{n % 256 or 1}/16", hca="rocep1s0f0")
    return Host(name=name, address=f"{name}.lab.internal", hardware=hardware, data_plane=(port,))


def gqa(
    *, layers: int = 10, kv_heads: int = 8, head_dim: int = 128, num_heads: int | None = 32, **extra: Any
) -> Architecture:
    attention = "mha" if num_heads == kv_heads else "gqa"
    return Architecture(
        layers=layers, attention=attention, kv_heads=kv_heads, head_dim=head_dim, num_heads=num_heads, **extra
    )


def mla(
    *, layers: int = 10, kv_lora_rank: int = 512, rope_dim: int = 64, num_heads: int | None = 64, **extra: Any
) -> Architecture:
    return Architecture(
        layers=layers,
        attention="mla",
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        num_heads=num_heads,
        **extra,
    )


def model(
    name: str = "m",
    *,
    arch: Architecture | None = None,
    weight_bytes: int = 10 * GIB,
    revision: str | None = SHA,
    quantization: str = "bf16",
    moe: MoE | None = None,
) -> ModelSpec:
    return ModelSpec(
        name=name,
        hf_repo=f"org/{name}",
        revision=revision,
        path=f"/models/{name}",
        weight_bytes=weight_bytes,
        quantization=quantization,
        moe=moe,
        architecture=arch if arch is not None else gqa(),
    )


def lane(name: str, model_name: str, hosts: Iterable[str], **fields: Any) -> Lane:
    hosts = tuple(hosts)
    values: dict[str, Any] = {
        "name": name,
        "engine": "vllm",
        "engine_version": "0.32.0",
        "image": f"registry.example/{name}@{DIGEST}",
        "model": model_name,
        "hosts": hosts,
        "tp": len(hosts),
        "max_model_len": 1000,
        "gpu_memory_utilization": 0.8,
    }
    values.update(fields)
    return Lane.model_validate(values)


def state(
    hosts: Iterable[Host], models: Iterable[ModelSpec], lanes: Iterable[Lane], commit: str = "test"
) -> DesiredState:
    return DesiredState(
        commit=commit,
        # No container memory cap: the fleet default (112g, for a 128 GB Spark) is at or above the memory of
        # the small round test profiles (with_profile), which the memory-budget rule denies. Tests of the cap
        # give their own fleet.
        fleet=FleetDefaults(container=ContainerContract(memory_limit=None)),
        hosts={h.name: h for h in hosts},
        models={m.name: m for m in models},
        lanes={ln.name: ln for ln in lanes},
    )


def one_lane_state(
    arch: Architecture,
    *,
    weight_bytes: int = 10 * GIB,
    hosts: int | None = None,
    hardware: str = "gb10",
    **lane_fields: Any,
) -> DesiredState:
    """One model, one lane named 'l' on hosts h0..h{n-1} (n = tp x pp unless given)."""
    tp = int(lane_fields.get("tp", 1))
    pp = int(lane_fields.get("pp", 1))
    n = hosts if hosts is not None else tp * pp
    names = [f"h{i}" for i in range(n)]
    lane_fields.setdefault("tp", tp)
    return state(
        [host(h, hardware) for h in names],
        [model("m", arch=arch, weight_bytes=weight_bytes)],
        [lane("l", "m", names, **lane_fields)],
    )


def with_lanes(desired: DesiredState, *lanes: Lane) -> DesiredState:
    """The same state with these lanes added or replaced."""
    merged = dict(desired.lanes)
    merged.update({ln.name: ln for ln in lanes})
    return dataclasses.replace(desired, lanes=merged)


def with_rule(policies: PolicySet, name: str, **changes: Any) -> PolicySet:
    """The same policies with one rule's enabled/severity changed and params merged (None removes one)."""
    rules = dict(policies.rules.rules)
    old = rules.get(name, RuleConfig())
    params = dict(old.params)
    for key, value in dict(changes.pop("params", {})).items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    rules[name] = old.model_copy(update={**changes, "params": params})
    return dataclasses.replace(policies, rules=RulesFile(rules=rules))


def without_rule(policies: PolicySet, name: str) -> PolicySet:
    rules = {k: v for k, v in policies.rules.rules.items() if k != name}
    return dataclasses.replace(policies, rules=RulesFile(rules=rules))


def only_rules(policies: PolicySet, *names: str) -> PolicySet:
    """Disable every rule but these (they stay configured, so nothing is reported missing)."""
    rules = {k: v.model_copy(update={"enabled": k in names}) for k, v in policies.rules.rules.items()}
    return dataclasses.replace(policies, rules=RulesFile(rules=rules))


def with_profile(
    policies: PolicySet,
    name: str,
    *,
    torch_visible_gib: float,
    boot_free_gib: float | None = None,
    max_boot_utilization: float = 0.85,
) -> PolicySet:
    """Add a hardware profile with round figures, for hand-checkable budgets."""
    src = "test figure"
    profile = HardwareProfile(
        memory_total=Figure(value=torch_visible_gib, unit="GiB", source=src),
        torch_visible=Figure(value=torch_visible_gib, unit="GiB", source=src),
        boot_free=Figure(value=boot_free_gib or torch_visible_gib * max_boot_utilization, unit="GiB", source=src),
        max_boot_utilization=Figure(value=max_boot_utilization, unit="fraction", source=src),
    )
    profiles: Mapping[str, HardwareProfile] = {**policies.hardware.profiles, name: profile}
    return dataclasses.replace(policies, hardware=HardwareFile(profiles=dict(profiles)))
