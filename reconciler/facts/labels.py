"""The labels lanes puts on every container it starts: the only record a host keeps of what a container is.

A host has no database of lanes: the next probe learns which lane, rank and
spec a container belongs to from these labels alone (`docker run --label`,
read back by `docker inspect`). So they are part of the host protocol,
defined here once and imported by the renderers that write them
(`engines/base.py`), the values that read them (`facts/observed.py`), the
probe program (`facts/probe_script.py`), the planner and the simulator.

Renaming one is a protocol change: containers started by an older lanes
would no longer be recognised, and since the spec hash covers the labels
(all but `lanes.spec` and `lanes.commit`), every lane would restart.
"""

from __future__ import annotations

LABEL_MANAGED = "lanes.managed"
"""`true` on every container lanes started; anything else on the host is someone else's."""
LABEL_LANE = "lanes.lane"
LABEL_RANK = "lanes.rank"
"""The rank as a decimal string; rank 0 is the head, the one that serves HTTP."""
LABEL_SPEC = "lanes.spec"
"""The spec hash of what the container runs: drift is a difference here."""
LABEL_COMMIT = "lanes.commit"
"""The state commit the container was started at (provenance only, not hashed)."""
LABEL_PORT = "lanes.port"
"""The lane's HTTP port, so a port held by a lane's own container is told from a foreign one."""
LABEL_ENGINE = "lanes.engine"

MANAGED_VALUE = "true"
MANAGED_FILTER = f"label={LABEL_MANAGED}={MANAGED_VALUE}"
"""The `docker ps --filter` argument that lists lanes' containers."""

ALL_LABELS = (LABEL_MANAGED, LABEL_LANE, LABEL_RANK, LABEL_SPEC, LABEL_COMMIT, LABEL_PORT, LABEL_ENGINE)
