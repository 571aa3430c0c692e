"""Where a model's files come from: a model file's `origin:` and the fleet file's `origins:`.

A checkpoint is downloaded once (to the control node, to a NAS, or onto one Spark) and staged from
there to every rank host that lacks it. The model file says which of the three it is:

    origin: {path: /srv/models/X}                  # a folder on the control node, where lanes runs
    origin: {host: nas1, path: /volume1/models/X}  # a folder on an SSH host of the fleet file's `origins:`
    origin: {host: dgx1}                           # a fleet host that already holds it at the model's `path`

An origin host (`origins:` in `state/fleet.yaml`, `reconciler.spec.fleet.OriginHost`) is reached over
SSH with the same key and the same pinned known_hosts as the Sparks, and nothing else: it is never
probed for containers, never leased, never reconciled. Its name shares the host namespace (a
`--from HOST:DIR` or an `origin.host` names either kind), so an origin may not be named like a host.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from reconciler.spec.base import AbsPath, Name, StrictModel


class Origin(StrictModel):
    """A model's source: `path` alone (the control node), `host` and `path`, or `host` alone (a Spark)."""

    host: Name | None = Field(
        default=None,
        description="an origin of the fleet file's `origins:` (then `path` is its folder) or a fleet host "
        "that holds the model at the model's own `path`; unset: `path` is on the control node",
    )
    path: AbsPath | None = Field(
        default=None, description="the folder holding the checkpoint, on `host` or else on the control node"
    )

    @model_validator(mode="after")
    def _one_place(self) -> Origin:
        if self.host is None and self.path is None:
            raise ValueError("an origin needs a `path` (on the control node), a `host`, or both")
        return self

    def describe(self, model_path: str) -> str:
        if self.host is None:
            return f"{self.path} on the control node"
        return f"{self.host}:{self.path or model_path}"
