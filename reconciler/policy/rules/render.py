"""The `render` rule: every lane must render to container specs before it is admitted.

Rendering turns a lane into the `docker run` argv of each rank, and some
lanes that pass every other rule cannot be rendered (a mount onto the model
cache's target, a secret whose variable is also a plain env entry). Doing it
here, in the policy step, makes `lanes check`, `lanes plan` and the daemon
agree: such a lane is a deny of that lane with its file and field, never an
error that escapes the planner and stops every other lane. The rendered specs
travel in the verdict, so the planner does not render a second time.

Not configurable: a lane that cannot be rendered cannot run, whatever the
rules file says. A stopped lane that cannot be rendered is a warning (it
would be denied if started), as other rules do for stopped lanes.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from reconciler.engines import ContainerSpec, render_lane
from reconciler.engines.hostfacts import rendering_reads
from reconciler.errors import InputError
from reconciler.facts.hostinfo import HostInfo
from reconciler.policy.reuse import Reuse
from reconciler.policy.verdict import Violation
from reconciler.spec.load import DesiredState

RULE = "render"

Rendered = dict[str, tuple[tuple[str, ContainerSpec], ...]]


def render_lanes(
    desired: DesiredState, host_info: Mapping[str, HostInfo] | None = None, reuse: Reuse | None = None
) -> tuple[Rendered, list[Violation]]:
    """(host, spec) of every rank of every renderable lane, and a finding for each lane that is not.

    `host_info`: what this cycle's probe read of each host it reached, for the per-rank values a lane takes
    from its hosts (`host_env`); without it those the probe reads render as placeholders the planner never
    starts (`engines.hostfacts`). `reuse`: a lane rendered before at this loaded commit from the same facts
    of its hosts (`engines.hostfacts.rendering_reads`) is not rendered again."""
    rendered: Rendered = {}
    violations: list[Violation] = []
    for name in sorted(desired.lanes):
        lane = desired.lanes[name]
        model = desired.models.get(lane.model)
        if model is None or any(h not in desired.hosts for h in lane.hosts):
            continue  # the topology and model checks say what is missing; nothing to render from
        if reuse is None:
            specs, finding = _render(desired, name, host_info)
        else:
            facts = tuple(rendering_reads((host_info or {}).get(h)) for h in lane.hosts)
            specs, finding = reuse.get(RULE, name, facts, partial(_render, desired, name, host_info))
        if specs is not None:
            rendered[name] = specs
        if finding is not None:
            violations.append(finding)
    return rendered, violations


def _render(
    desired: DesiredState, name: str, host_info: Mapping[str, HostInfo] | None
) -> tuple[tuple[tuple[str, ContainerSpec], ...] | None, Violation | None]:
    """One lane's (host, spec) per rank, or the finding that says why it cannot be rendered."""
    lane = desired.lanes[name]
    model = desired.models[lane.model]
    try:
        specs = render_lane(lane, model, desired.fleet, desired.hosts, desired.commit, host_info)
    except InputError as exc:
        field = exc.field or ""
        message = exc.message
    except Exception as exc:  # a renderer's bug must cost this lane only, never the commit
        field, message = "", f"lanes could not render this lane ({type(exc).__name__}: {exc})"
    else:
        return tuple((lane.hosts[i], spec) for i, spec in enumerate(specs)), None
    where = desired.lane_file(name) + (f": {field}" if field else "")
    suffix = "" if lane.running else " (the lane is stopped; starting it would be denied)"
    return None, Violation(
        rule=RULE,
        severity="deny" if lane.running else "warn",
        lane=name,
        host=None,
        rank=None,
        message=f"{where}: cannot be rendered to containers: {message}{suffix}",
        detail={"file": desired.lane_file(name), "field": field},
    )
