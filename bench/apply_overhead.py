"""The reconciler's own overhead when it converges the example fleet on simulated Sparks.

    .venv/bin/python bench/apply_overhead.py [--load-s 10] [--runs 3]

Prints, per run: the wall time of the apply cycle, the stand-ins' configured
load time, the bare SSH round-trip time measured through the same transport,
the number of sequential round trips on the critical path (the probe, one per
plan step, the lease release), the ratio

    wall / (load time + sequential round trips x round-trip time)

(goal 1.05 or less, issue 27; it was 1.10) and the start skew between the ranks of each lane, from
the StartedAt the runtime reports for each rank (goal under 0.5 s). Not a
test: it prints numbers.

Each run is cold, as `lanes apply` from a fresh shell is: its cycle opens an SSH connection to every host
and installs the probe program there (the simulated hosts run in this process, so both ends of each key
exchange are counted). `--warm` probes the fleet once before the timed cycle, as a running daemon has
done: then the wall time holds what every apply costs, not what the first contact with a host does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's own example-state helpers in tests/

from reconciler.cli.demo import start_sim, stop_demo
from reconciler.source.loadcommit import LoadedCommit
from reconciler.spec.lane import Health
from reconciler.spec.load import DesiredState
from reconciler.transport.base import HostTarget
from tests.support.example import example_policies, example_state, with_lane


def prepared_state(poll_s: float) -> DesiredState:
    state = example_state()
    health = Health(poll_interval_s=poll_s, port_timeout_s=60, ready_timeout_s=120).model_dump()
    for name, lane in state.lanes.items():
        if lane.running:
            state = with_lane(state, name, health=health)
    return state


async def one_run(load_s: float, poll_s: float, salt: int, warm: bool = False) -> dict[str, float]:
    state = prepared_state(poll_s)
    loaded = LoadedCommit(state.commit, state, example_policies())
    with tempfile.TemporaryDirectory(prefix="lanes-bench-") as tmp:
        env = await start_sim(
            loaded, Path(tmp), base_address=f"127.41.{salt}.", standin_env={"STANDIN_LOAD_S": str(load_s)}
        )
        try:
            target = next(iter(env.runner.settings.overrides))
            host = env.fleet.targets[target]
            ht = HostTarget(target, host.address, host.port, host.user)
            await env.transport.run(ht, ["docker", "ps", "-q"])
            rtts = []
            for _ in range(20):
                t = time.perf_counter()
                await env.transport.run(ht, ["docker", "ps", "-q"])
                rtts.append(time.perf_counter() - t)
            rtt = statistics.median(rtts)
            if warm:  # connections open and the probe program installed, as in a daemon that probed before
                await env.runner.observe_and_plan(loaded)
            t0 = time.perf_counter()
            result = await env.runner.run_cycle(loaded)
            wall = time.perf_counter() - t0
            assert result.ok, [r.error for r in result.results]
            deploys = [lp for lp in result.plan.lanes if lp.action == "deploy"]
            sequential = 1 + max(len(lp.steps) for lp in deploys) + 1
            skew = 0.0
            for lp in deploys:  # the runtime's own StartedAt of each rank, read back with docker inspect
                starts = []
                for rank_host, spec in lp.specs:
                    where = env.fleet.targets[rank_host]
                    out = await env.transport.run(
                        HostTarget(rank_host, where.address, where.port, where.user), ["docker", "inspect", spec.name]
                    )
                    started = json.loads(out.stdout)[0]["State"]["StartedAt"]
                    starts.append(datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp())
                skew = max(skew, max(starts) - min(starts))
            floor = load_s + sequential * rtt
            return {
                "wall": wall,
                "rtt": rtt,
                "sequential": sequential,
                "floor": floor,
                "ratio": wall / floor,
                "skew": skew,
            }
        finally:
            await stop_demo(env)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load-s", type=float, default=10.0)
    parser.add_argument("--poll-s", type=float, default=0.2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="probe the fleet once before each timed cycle")
    args = parser.parse_args()
    how = "warm (probed once before)" if args.warm else "cold (first contact with every host)"
    print(f"example fleet on simulated Sparks: stand-in load {args.load_s} s, readiness poll {args.poll_s} s, {how}")
    print(f"{'run':>3} {'wall s':>8} {'rtt ms':>7} {'seq':>4} {'floor s':>8} {'ratio':>6} {'skew s':>7}")
    ratios = []
    for i in range(args.runs):
        r = await one_run(args.load_s, args.poll_s, 10 + i, args.warm)
        ratios.append(r["ratio"])
        print(
            f"{i + 1:>3} {r['wall']:8.2f} {r['rtt'] * 1000:7.1f} {r['sequential']:4.0f} {r['floor']:8.2f} "
            f"{r['ratio']:6.3f} {r['skew']:7.3f}"
        )
    print(f"median overhead ratio {statistics.median(ratios):.3f} (goal <= 1.05)")


if __name__ == "__main__":
    asyncio.run(main())
