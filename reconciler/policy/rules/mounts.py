"""`mounts`: a lane mounts only host paths the policy allows.

A lane's `mounts:` are bind mounts of host paths into its engine containers, which run privileged or as
root. A lane that mounts `/` (or `/etc`, `/root/.ssh`, the docker socket, lanes' own state directory
with the env files and the lease) hands the host to whoever can push a lane file. Policy as data:

- `allow`: host path prefixes a mount source may be at or under (segment-wise: `/models` allows
  `/models/x`, not `/models2`). Every model's `path` in `state/models/` and the fleet's HF cache are
  allowed as well, since the engines read them anyway.
- `deny`: host paths no mount may touch, whatever `allow` says: the path itself, anything under it,
  and anything above it (mounting `/root` exposes `/root/.ssh`). `/` only denies `/` itself (everything
  is under it). The fleet's `state_dir_on_host` is always denied.

The same deny list and the same words cover every other host path a lane puts into its containers or
has lanes write (issue 24): its model's `path` (mounted read-only at its own path), the fleet's
`hf_cache` (mounted read-write) and `state_dir_on_host` (where lanes writes env files and the lease).
A model `path: /root/.ssh` or `hf_cache: /etc` hands the host over just as a mount of it would. The
model path and the HF cache are checked against `deny` and the state directory; the state directory
against `deny` alone (it is what the rest is kept out of). `allow` does not apply to them: they are
the fleet's own folders, which `allow` exists to add to.

Paths compare after collapsing repeated slashes and a trailing one (`//etc/` is `/etc`); `.`/`..`
segments never get this far (the lane schema refuses them). What a path resolves to on a host (a
symlink under /models pointing at /etc) is not visible to the policy: the allowed prefixes are
directories the operators keep.
"""

from __future__ import annotations

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context
from reconciler.spec.lane import Lane

RULE = "mounts"


def normal(path: str) -> str:
    """`/a//b/` -> `/a/b`; `/` stays `/`."""
    return "/" + "/".join(part for part in path.split("/") if part)


def under(path: str, prefix: str) -> bool:
    """`path` is `prefix` or inside it, segment-wise."""
    return prefix in ("/", path) or path.startswith(prefix + "/")


def denied_by(path: str, deny: tuple[str, ...]) -> str | None:
    """The deny entry `path` touches: equal, inside it (not for `/`), or containing it."""
    for entry in deny:
        if path == entry or under(entry, path) or (entry != "/" and under(path, entry)):
            return entry
    return None


def _why_denied(source: str, deny: tuple[str, ...]) -> str | None:
    hit = denied_by(source, deny)
    if hit is None:
        return None
    relation = "is" if hit == source else ("contains" if under(hit, source) else "is under")
    return f"{relation} {hit}, which policies/rules.yaml `mounts.deny` keeps out of every container"


def _named_paths(
    ctx: Context, rule: RuleSettings, lane: Lane, denials: dict[tuple[str, tuple[str, ...]], str | None] | None = None
) -> None:
    """The model's path, the HF cache and the state directory of a lane, against the same deny list.

    `denials`: what was found for each (path, deny list) at the lanes before, kept by the caller: a thousand
    lanes name a few models, one HF cache and one state directory."""
    desired = ctx.desired
    fleet = desired.fleet
    policy_deny = tuple(dict.fromkeys(normal(p) for p in rule.strings("deny")))
    with_state = tuple(dict.fromkeys((*policy_deny, normal(fleet.state_dir_on_host))))
    known = {} if denials is None else denials
    fleet_file = "state/fleet.yaml"
    model = desired.models.get(lane.model)
    named: list[tuple[str, str, str, tuple[str, ...]]] = []
    if model is not None:
        named.append(
            (desired.files.get(f"models/{model.name}", f"models/{model.name}"), "path", model.path, with_state)
        )
    named.append((fleet_file, "hf_cache", fleet.hf_cache, with_state))
    named.append((fleet_file, "state_dir_on_host", fleet.state_dir_on_host, policy_deny))
    for where, field, path, deny in named:
        key = (path, deny)
        if key not in known:
            known[key] = _why_denied(normal(path), deny)
        why = known[key]
        if why is not None:
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                message=f"{where}: {field}: host path {path} {why} (lane {lane.name} mounts or writes it)",
                detail={"file": where, "field": field, "source": path},
            )


def check_mounts(ctx: Context, rule: RuleSettings) -> None:
    desired = ctx.desired
    fleet = desired.fleet
    denials: dict[tuple[str, tuple[str, ...]], str | None] = {}
    for lane in desired.lanes.values():
        _named_paths(ctx, rule, lane, denials)
    deny = tuple(dict.fromkeys(normal(p) for p in (*rule.strings("deny"), fleet.state_dir_on_host)))
    allow = tuple(
        dict.fromkeys(
            (
                *(normal(p) for p in rule.strings("allow")),
                # A model `path: /` must not make every mount allowed: a path from state that is denied allows nothing.
                *(
                    normal(p)
                    for p in (fleet.hf_cache, *(m.path for m in desired.models.values()))
                    if denied_by(normal(p), deny) is None
                ),
            )
        )
    )
    for lane in desired.lanes.values():
        where = desired.lane_file(lane.name)
        for index, mount in enumerate(lane.mounts):
            source = normal(mount.source)
            field = f"mounts[{index}]"
            why = _why_denied(source, deny)
            if why is None and not any(under(source, prefix) for prefix in allow):
                why = (
                    "is outside the allowed host paths (policies/rules.yaml `mounts.allow`, the models' paths and "
                    f"the HF cache: {', '.join(allow)})"
                )
            if why is None:
                continue
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                message=f"{where}: {field}: host path {mount.source} {why}",
                detail={"file": where, "field": field, "source": mount.source},
            )
