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

Paths compare after collapsing repeated slashes and a trailing one (`//etc/` is `/etc`); `.`/`..`
segments never get this far (the lane schema refuses them). What a path resolves to on a host (a
symlink under /models pointing at /etc) is not visible to the policy: the allowed prefixes are
directories the operators keep.
"""

from __future__ import annotations

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context

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


def check_mounts(ctx: Context, rule: RuleSettings) -> None:
    desired = ctx.desired
    fleet = desired.fleet
    deny = tuple(dict.fromkeys(normal(p) for p in (*rule.strings("deny"), fleet.state_dir_on_host)))
    allow = tuple(
        dict.fromkeys(
            normal(p) for p in (*rule.strings("allow"), fleet.hf_cache, *(m.path for m in desired.models.values()))
        )
    )
    for lane in desired.lanes.values():
        where = desired.lane_file(lane.name)
        for index, mount in enumerate(lane.mounts):
            source = normal(mount.source)
            field = f"mounts[{index}]"
            hit = denied_by(source, deny)
            if hit is not None:
                relation = "is" if hit == source else ("contains" if under(hit, source) else "is under")
                why = f"{relation} {hit}, which policies/rules.yaml `mounts.deny` keeps out of every container"
            elif not any(under(source, prefix) for prefix in allow):
                why = (
                    "is outside the allowed host paths (policies/rules.yaml `mounts.allow`, the models' paths and "
                    f"the HF cache: {', '.join(allow)})"
                )
            else:
                continue
            ctx.report(
                rule,
                severity="deny",
                lane=lane,
                message=f"{where}: {field}: host path {mount.source} {why}",
                detail={"file": where, "field": field, "source": mount.source},
            )
