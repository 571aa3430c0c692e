"""`image-digest` and `model-revision`: what runs must be named immutably.

A tag or a branch can move under a commit, so the same commit could start a
different engine or different weights tomorrow; a digest and a commit sha
cannot. Both rules read one field and need no parameters.
"""

from __future__ import annotations

import re

from reconciler.policy.config import RuleSettings
from reconciler.policy.context import Context

REVISION_RE = re.compile(r"^[0-9a-f]{40}$")


def check_image_digest(ctx: Context, rule: RuleSettings) -> None:
    for lane in ctx.desired.lanes.values():
        if lane.image_pinned:
            continue
        base = lane.image.split("@", 1)[0]
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=(
                f"image '{lane.image}' is not pinned by digest; write it as {base}@sha256:<64 hex digits> "
                "(the digest `lanes upstream` or `docker buildx imagetools inspect` prints)"
            ),
            detail={"image": lane.image},
        )


def check_model_revision(ctx: Context, rule: RuleSettings) -> None:
    for lane in ctx.desired.lanes.values():
        model = ctx.desired.models.get(lane.model)
        if model is None:
            continue
        revision = model.revision
        if revision is not None and REVISION_RE.match(revision):
            continue
        found = "has no revision" if revision is None else f"revision '{revision}' is not a commit sha"
        ctx.report(
            rule,
            severity="deny",
            lane=lane,
            message=(
                f"model {model.name} ({model.hf_repo}) {found}; set revision to the 40-hex commit sha of the "
                "checkpoint the hosts hold (a branch like 'main' moves)"
            ),
            detail={"model": model.name, "revision": revision or ""},
        )
