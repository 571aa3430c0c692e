"""Load the desired state and the policy set from the files of one commit.

The loader sees only a mapping of repository paths to blob bytes, handed in
by the git layer, so what is checked is exactly what was pushed and this
module never touches the working tree.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.errors import InputError
from reconciler.spec.bench import BenchProfilesFile, load_bench_profiles
from reconciler.spec.fleet import FleetDefaults, Host
from reconciler.spec.lane import Lane, after_problems
from reconciler.spec.manifest import MANIFEST_SUFFIX, Manifest, parse_manifest
from reconciler.spec.model import ModelSpec
from reconciler.spec.policyfiles import HardwareFile, KnownIssuesFile, RulesFile
from reconciler.spec.upstream import UpstreamsFile
from reconciler.spec.windows import WindowsFile
from reconciler.spec.yamlsrc import parse_yaml, validate

YAML_SUFFIXES = (".yaml", ".yml")
KNOWN_SHOWN = 20
"""Lane names an error lists at most (a state of a thousand lanes would fill a screen)."""


@dataclass(frozen=True)
class DesiredState:
    """Everything `state/` says, for one commit."""

    commit: str
    fleet: FleetDefaults
    hosts: Mapping[str, Host]
    models: Mapping[str, ModelSpec]
    lanes: Mapping[str, Lane]
    upstreams: UpstreamsFile = field(default_factory=UpstreamsFile)
    bench_profiles: BenchProfilesFile | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    """`kind/name` (e.g. `lanes/glm53`) to the repository path it came from."""
    manifests: Mapping[str, Manifest] = field(default_factory=dict)
    """Model name -> its manifest (`state/models/<model>.manifest.json`), for the models that have one."""

    def lane_file(self, lane: str) -> str:
        return self.files.get(f"lanes/{lane}", f"lanes/{lane}")

    def running_lanes(self) -> list[Lane]:
        return [lane for lane in self.lanes.values() if lane.running]


@dataclass(frozen=True)
class PolicySet:
    hardware: HardwareFile
    rules: RulesFile
    known_issues: KnownIssuesFile
    windows: WindowsFile = field(default_factory=WindowsFile)
    """Change windows (`policies/windows.yaml`, optional: without it no change waits for a window)."""


def _files_under(files: Mapping[str, bytes], folder: str) -> list[str]:
    prefix = folder.rstrip("/") + "/"
    return sorted(p for p in files if p.startswith(prefix) and "/" not in p[len(prefix) :])


def _stem(path: str) -> str:
    base = posixpath.basename(path)
    for suffix in YAML_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def _load_named(
    files: Mapping[str, bytes], folder: str, model: type[Any], *, beside: tuple[str, ...] = ()
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each file of a folder is one object whose name is the file's stem (files ending in `beside` are
    another loader's: a model's manifest sits beside its model file)."""
    out: dict[str, Any] = {}
    where: dict[str, str] = {}
    kind = posixpath.basename(folder)
    for path in _files_under(files, folder):
        if beside and path.endswith(beside):
            continue
        if not path.endswith(YAML_SUFFIXES):
            raise InputError("only .yaml files belong here", file=path)
        stem = _stem(path)
        doc = parse_yaml(path, files[path])
        if isinstance(doc.value, Mapping) and "name" in doc.value and doc.value["name"] != stem:
            raise InputError(
                f"name '{doc.value['name']}' differs from the file name '{stem}'; rename one of them",
                file=path,
                line=doc.line(("name",)),
                field="name",
            )
        obj = validate(model, doc, defaults={"name": stem})
        if obj.name in out:
            raise InputError(f"{kind[:-1]} '{obj.name}' is defined twice (also in {where[obj.name]})", file=path)
        out[obj.name] = obj
        where[obj.name] = path
    return out, where


def load_desired(files: Mapping[str, bytes], commit: str, *, state_dir: str = "state") -> DesiredState:
    """Build the desired state from the files of one commit."""
    fleet_path = f"{state_dir}/fleet.yaml"
    if fleet_path not in files:
        raise InputError(f"missing {fleet_path}: every state repo needs fleet defaults", file=fleet_path)
    fleet = validate(FleetDefaults, parse_yaml(fleet_path, files[fleet_path]))
    hosts, host_files = _load_named(files, f"{state_dir}/hosts", Host)
    _check_origin_names(fleet, hosts, fleet_path)
    models, model_files = _load_named(files, f"{state_dir}/models", ModelSpec, beside=(MANIFEST_SUFFIX,))
    manifests, manifest_files = _load_manifests(files, f"{state_dir}/models", models)
    _check_model_origins(files, fleet, hosts, models, model_files, manifests, state_dir)
    lanes, lane_files = _load_named(files, f"{state_dir}/lanes", Lane)
    upstreams = UpstreamsFile()
    ups_path = f"{state_dir}/upstreams.yaml"
    if ups_path in files:
        upstreams = validate(UpstreamsFile, parse_yaml(ups_path, files[ups_path]))
    source_names = {source.name for source in upstreams.sources}
    for name, lane in lanes.items():
        path = lane_files[name]
        if lane.model not in models:
            doc = parse_yaml(path, files[path])
            known = ", ".join(sorted(models)) or "none"
            raise InputError(
                f"model '{lane.model}' is not defined in {state_dir}/models/ (known: {known})",
                file=path,
                line=doc.line(("model",)),
                field="model",
            )
        for ref, field_name in ((lane.upstream, "upstream"), (lane.track.source if lane.track else None, "track")):
            if ref is not None and ref not in source_names:
                doc = parse_yaml(path, files[path])
                raise InputError(
                    f"upstream source '{ref}' is not declared in {ups_path}",
                    file=path,
                    line=doc.line((field_name,)),
                    field=field_name if field_name == "upstream" else "track.source",
                )
    _check_gateway(files, fleet, lanes, fleet_path)
    for name, why in after_problems(lanes):
        path = lane_files[name]
        raise InputError(why, file=path, line=parse_yaml(path, files[path]).line(("after",)), field="after")
    profiles = load_bench_profiles(files, state_dir=state_dir)
    for name, lane in lanes.items():
        if isinstance(lane.bench_profile, str) and profiles.get(lane.bench_profile) is None:
            path = lane_files[name]
            raise InputError(
                f"bench profile '{lane.bench_profile}' is not defined (known: {', '.join(sorted(profiles.profiles))})",
                file=path,
                line=parse_yaml(path, files[path]).line(("bench_profile",)),
                field="bench_profile",
            )
    where = {f"hosts/{k}": v for k, v in host_files.items()}
    where.update({f"models/{k}": v for k, v in model_files.items()})
    where.update({f"lanes/{k}": v for k, v in lane_files.items()})
    where.update({f"manifests/{k}": v for k, v in manifest_files.items()})
    return DesiredState(
        commit=commit,
        fleet=fleet,
        hosts=hosts,
        models=models,
        lanes=lanes,
        upstreams=upstreams,
        files=where,
        bench_profiles=profiles,
        manifests=manifests,
    )


def _check_origin_names(fleet: FleetDefaults, hosts: Mapping[str, Host], fleet_path: str) -> None:
    """`--from NAME:DIR` and `origin.host` name a host or an origin: one name, one machine."""
    for index, origin in enumerate(fleet.origins):
        if origin.name in hosts:
            raise InputError(
                f"origin '{origin.name}' has the name of a fleet host; give the origin another name",
                file=fleet_path,
                field=f"origins[{index}].name",
            )


def _check_gateway(
    files: Mapping[str, bytes], fleet: FleetDefaults, lanes: Mapping[str, Lane], fleet_path: str
) -> None:
    """Every lane the gateway routes to exists and serves the name it is listed under: the gateway forwards a
    request's `model` unchanged, so an engine serving another name would refuse it."""
    if fleet.gateway is None:
        return
    for model, names in fleet.gateway.models.items():
        for index, name in enumerate(names):
            lane = lanes.get(name)
            if lane is not None and lane.served_name == model:
                continue
            if lane is None:
                known = sorted(lanes)
                listed = ", ".join(known[:KNOWN_SHOWN]) + (
                    f" and {len(known) - KNOWN_SHOWN} more" if len(known) > KNOWN_SHOWN else ""
                )
                why = f"lane '{name}' is not defined in state/lanes/ (known: {listed or 'none'})"
            else:
                why = f"lane '{name}' serves '{lane.served_name}', not '{model}' (its served_model_name, or its model)"
            raise InputError(
                f"gateway model '{model}': {why}",
                file=fleet_path,
                line=parse_yaml(fleet_path, files[fleet_path]).line(("gateway", "models", model, index)),
                field=f"gateway.models.{model}[{index}]",
            )
    routed = {name for names in fleet.gateway.models.values() for name in names}
    for name in fleet.gateway.lanes:
        if name not in routed:
            # Thresholds for a lane the gateway does not route would never be read: a typo, said at once.
            raise InputError(
                f"gateway lanes '{name}': not a lane of gateway.models (its thresholds would never be used)",
                file=fleet_path,
                line=parse_yaml(fleet_path, files[fleet_path]).line(("gateway", "lanes", name)),
                field=f"gateway.lanes.{name}",
            )


def _load_manifests(
    files: Mapping[str, bytes], folder: str, models: Mapping[str, ModelSpec]
) -> tuple[dict[str, Manifest], dict[str, str]]:
    out: dict[str, Manifest] = {}
    where: dict[str, str] = {}
    for path in _files_under(files, folder):
        if not path.endswith(MANIFEST_SUFFIX):
            continue
        stem = posixpath.basename(path)[: -len(MANIFEST_SUFFIX)]
        if stem not in models:
            known = ", ".join(sorted(models)) or "none"
            raise InputError(
                f"a manifest for model '{stem}', which has no model file {folder}/{stem}.yaml (known: {known})",
                file=path,
            )
        manifest = parse_manifest(path, files[path])
        if manifest.model != stem:
            raise InputError(
                f"model '{manifest.model}' differs from the file name '{stem}'; rename one of them",
                file=path,
                field="model",
            )
        out[stem] = manifest
        where[stem] = path
    return out, where


def _check_model_origins(
    files: Mapping[str, bytes],
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    models: Mapping[str, ModelSpec],
    model_files: Mapping[str, str],
    manifests: Mapping[str, Manifest],
    state_dir: str,
) -> None:
    """An origin names a host lanes can reach, and staging has a manifest to copy and verify against."""
    for name, model in models.items():
        if model.origin is None:
            continue
        path = model_files[name]
        host = model.origin.host
        if host is not None and host not in hosts and fleet.origin(host) is None:
            known = ", ".join(sorted([*(o.name for o in fleet.origins), *hosts])) or "none"
            raise InputError(
                f"'{host}' is neither an origin of {state_dir}/fleet.yaml's `origins:` nor a fleet host "
                f"(known: {known})",
                file=path,
                line=parse_yaml(path, files[path]).line(("origin", "host")),
                field="origin.host",
            )
        if name not in manifests:
            raise InputError(
                f"a model with an origin needs its manifest {state_dir}/models/{name}{MANIFEST_SUFFIX} (every file "
                f"with its size and sha256): write it with `lanes model manifest {name} --from DIR` and commit it",
                file=path,
                line=parse_yaml(path, files[path]).line(("origin",)),
                field="origin",
            )


def load_policies(files: Mapping[str, bytes], *, policies_dir: str = "policies") -> PolicySet:
    def one(name: str, model: type[Any]) -> Any:
        path = f"{policies_dir}/{name}"
        if path not in files:
            raise InputError(f"missing policy file {path}", file=path)
        return validate(model, parse_yaml(path, files[path]))

    windows_path = f"{policies_dir}/windows.yaml"
    return PolicySet(
        hardware=one("hardware.yaml", HardwareFile),
        rules=one("rules.yaml", RulesFile),
        known_issues=one("known-issues.yaml", KnownIssuesFile),
        windows=one("windows.yaml", WindowsFile) if windows_path in files else WindowsFile(),
    )
