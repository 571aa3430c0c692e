"""What the integration rig costs on this machine: building it, one real apply, one no-op plan, tearing down.

    .venv/bin/python bench/rig_time.py [--tier]

As root on Debian 12. Builds the rig of tests/rig (four network-namespace
hosts with their own sshd and podman store, the registry, the stand-in
image), pushes two lanes to the forge, times `lanes apply` converging them
over real SSH and `lanes plan` finding nothing to do, then tears the rig
down, and prints one JSON object of seconds. With `--tier` it runs the whole
rig test tier instead and prints its wall time (the goal: under 600 s on 2
cores). Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/rig is the rig's code

from tests.rig.fleet import quad_and_solo  # noqa: E402
from tests.rig.rig import running_rig  # noqa: E402


def one_apply() -> dict[str, float]:
    t0 = time.monotonic()
    out: dict[str, float] = {}
    with running_rig() as rig:
        out["setup_s"] = round(time.monotonic() - t0, 2)
        rig.publish(quad_and_solo(rig), "bench: quad over rig1-4, solo on rig2")
        run = rig.apply()
        if run.returncode != 0:
            raise SystemExit(run.describe())
        out["apply_s"] = round(run.seconds, 2)
        plan = rig.plan("--exit-code")
        if plan.returncode != 0:
            raise SystemExit(plan.describe())
        out["noop_plan_s"] = round(plan.seconds, 2)
        t1 = time.monotonic()
    out["teardown_s"] = round(time.monotonic() - t1, 2)
    out["total_s"] = round(time.monotonic() - t0, 2)
    return out


def tier() -> dict[str, float]:
    t0 = time.monotonic()
    result = subprocess.run(
        [str(ROOT / ".venv/bin/pytest"), "-m", "rig", "tests/rig", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        check=False,
    )
    return {"tier_wall_s": round(time.monotonic() - t0, 1), "exit": result.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", action="store_true", help="run the whole rig tier and time it")
    args = parser.parse_args()
    print(json.dumps(tier() if args.tier else one_apply()))


if __name__ == "__main__":
    main()
