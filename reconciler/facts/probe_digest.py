"""Which parts of a probe answer may be answered with a digest, and that digest.

A no-op resync should cost what changed, not what exists: a host whose facts are the same as
the ones the daemon already holds answers with the digest of those facts instead of the facts
themselves, plus the few figures that move on every read. The split is the contract between the
probe program (`probe_script`, which computes the same digest on the host, in its own copy of
these rules: it cannot import lanes) and the parser (`parse`), so it lives in one place here;
`tests/facts` runs the real program and checks that both sides agree.

What is volatile (always sent, never in the digest), and why:

- `time`: the host's clock, read per probe; the planner compares leases against it.
- `meminfo`: MemAvailable, MemFree and Cached move on every read of a busy host. The budget
  reads free memory at boot from each idle host's MemAvailable every cycle, so it must be fresh,
  and in the digest it would change the digest every cycle.
- `disk` and the host section's `disks`: free bytes move whenever anything writes a log. The
  model-disk rule reads them every cycle.

Everything else is in the digest: containers (state, exit code, start time, labels), unmanaged
containers, listening ports, model presence and bytes, the lease (it moves only when renewed,
which is during an apply), OS and DGX release, kernel, driver, the CUDA version (the probe sends
nvidia-smi's header line only, so its clock and temperatures never reach the digest), GPU
compute pids, links, RDMA devices, /dev/infiniband, and the probe's own errors. A link going
down, a driver upgrade, a container exiting: each changes the digest, so the next resync gets
the whole answer. Health of the engines is not part of the probe at all (it is asked over HTTP).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

VOLATILE_KEYS = ("time", "meminfo", "disk")
"""Top-level keys of the probe answer that are sent every time and kept out of the digest."""
VOLATILE_HOST_KEYS = ("disks",)
"""Keys of the answer's `host` section that are sent every time (as top-level `disks` when unchanged)."""
ANSWER_KEYS = ("digest", "unchanged")
"""What the program adds about the digest itself: never part of what it digests."""


def stable_view(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The answer without its volatile parts: what the digest covers."""
    out = {k: v for k, v in answer.items() if k not in VOLATILE_KEYS and k not in ANSWER_KEYS}
    host = out.get("host")
    if isinstance(host, dict):
        out["host"] = {k: v for k, v in host.items() if k not in VOLATILE_HOST_KEYS}
    return out


def fact_digest(answer: Mapping[str, Any]) -> str:
    """sha256 of the stable view as compact, key-sorted JSON (what the probe program computes too)."""
    text = json.dumps(stable_view(answer), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
