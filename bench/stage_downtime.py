"""A lane change's downtime when its new model must first be staged: against the engine's load time alone.

    .venv/bin/python bench/stage_downtime.py [--load-s 5] [--repeats 3] [--json]

As root on Debian 12. Builds the rig of tests/rig; rig1-3 get models folders of their own (tmpfs), rig4
holds two generated checkpoints (the models' origin). A lane on rig1-3 runs model A; the commit measured
moves it to model B, which no receiver holds yet, on an engine that loads for `--load-s` seconds. From the
journal of that apply:

- downtime: from the old ranks' stop starting to the new ranks' readiness gate passing;
- load alone: from the new ranks' start to the gate passing (what no tool can shorten);
- ratio = downtime / load alone (goal <= 1.02: everything that can be done before the stop, staging the
  40 MiB of model B to three hosts included, is done before it);
- staging: the stage step's seconds, all before the stop.

Not a test: it prints numbers. Each repeat moves the lane back and forth between two fresh models.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/rig is the rig's code

from tests.rig.rig import Rig, running_rig  # noqa: E402
from tests.rig.staterepo import DEFAULT_HEALTH  # noqa: E402
from tests.rig.test_stage_apply import RECEIVERS, checkpoint, small_margin, state_files  # noqa: E402


def journal(rig: Rig, lane: str, commit: str) -> dict[str, tuple[float, float]]:
    with sqlite3.connect(rig.db) as db:
        rows = db.execute(
            "SELECT kind, started, finished FROM journal WHERE lane = ? AND `commit` = ? ORDER BY id", (lane, commit)
        ).fetchall()
    out: dict[str, tuple[float, float]] = {}
    for kind, start, end in rows:
        first = out.get(str(kind), (float(start), float(end or 0)))
        out[str(kind)] = (min(first[0], float(start)), max(first[1], float(end or 0)))
    return out


def one_move(rig: Rig, model: str, load_s: float) -> dict[str, float]:
    files = checkpoint(rig.models_root / model)
    state_files(rig, files, model=model)
    health = {**DEFAULT_HEALTH, "ready_timeout_s": load_s + 60}  # the gate waits out the load
    lane = rig.lane("trio", RECEIVERS, env={"STANDIN_LOAD_S": str(load_s)}, health=health)
    lane["model"] = model
    commit = rig.publish({"trio": lane}, f"trio moves to {model}")
    run = rig.apply(timeout=600)
    if run.returncode != 0:
        raise SystemExit(run.describe())
    steps = journal(rig, "trio", commit)
    ready_end = steps["wait-ready"][1]
    out = {
        "stage_s": steps["stage"][1] - steps["stage"][0],
        "load_alone_s": ready_end - steps["start"][0],
        "apply_s": run.seconds,
    }
    if "stop" in steps:
        out["downtime_s"] = ready_end - steps["stop"][0]
        out["ratio"] = out["downtime_s"] / out["load_alone_s"]
        out["stop_s"] = steps["stop"][1] - steps["stop"][0]
        out["stop_to_start_s"] = steps["start"][0] - steps["stop"][0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--load-s", type=float, default=5.0, help="the engine's load time (the stand-in's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    moves: list[dict[str, float]] = []
    with running_rig() as rig:
        for host in RECEIVERS:
            rig.own_models(host, 400)
        small_margin(rig, True)
        one_move(rig, "staged-0", args.load_s)  # the lane's first start: nothing to stop yet
        for i in range(1, args.repeats + 1):
            moves.append(one_move(rig, f"staged-{i}", args.load_s))
            shutil.rmtree(rig.models_root / f"staged-{i - 1}", ignore_errors=True)
    result: dict[str, Any] = {
        "load_s": args.load_s,
        "moves": moves,
        "median_ratio": round(statistics.median(m["ratio"] for m in moves), 4),
        "median_stage_s": round(statistics.median(m["stage_s"] for m in moves), 2),
        "median_downtime_s": round(statistics.median(m["downtime_s"] for m in moves), 2),
        "median_load_alone_s": round(statistics.median(m["load_alone_s"] for m in moves), 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"engine load (the stand-in's): {args.load_s:g} s; three receivers, 40 MiB model staged per move")
    for i, m in enumerate(moves, 1):
        print(
            f"move {i}: staging {m['stage_s']:.2f} s (before the stop), downtime {m['downtime_s']:.2f} s, "
            f"load alone {m['load_alone_s']:.2f} s, ratio {m['ratio']:.3f} (stop {m['stop_s']:.2f} s, "
            f"stop to start {m['stop_to_start_s']:.2f} s)"
        )
    print(f"median ratio downtime / load alone: {result['median_ratio']} (goal <= 1.02)")


if __name__ == "__main__":
    main()
