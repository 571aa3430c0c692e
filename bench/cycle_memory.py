"""What one reconcile cycle allocates and keeps at 1,000 hosts: tracemalloc snapshots around cycles.

Builds the state repository and the simulated fleet of `bench/scale.py` (one four-host vLLM lane per
four hosts, the fleet in a process of its own) and runs the daemon's own `CycleRunner.observe_and_plan`
in this process twice: a first cycle (every probe program installed) and a no-op one. Prints the peak
traced memory of each cycle, what the runner still holds after it (grown since before the first), and
the allocation sites that hold the most at the end, by source line. Nothing is applied (no container
runs), so this is the probe, the policy and the plan of a cycle: the part every resync pays.

    .venv/bin/python bench/cycle_memory.py [--hosts 1000] [--top 25]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import sys
import tempfile
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import build_repo, fleet_spec, loopback_base

from reconciler.execute.cycle import CycleRunner, CycleSettings, HostOverride
from reconciler.execute.secrets import SecretStore
from reconciler.sim.fleetproc import FleetProcess
from reconciler.source.loadcommit import load_commit
from reconciler.store.journal import Store
from reconciler.transport.ssh import SSHTransport

MB = 1024 * 1024


async def cycles(repo: Path, ready: dict[str, object], work: Path, top: int) -> None:
    loaded = load_commit(repo)
    addresses = ready["addresses"]
    assert isinstance(addresses, dict)
    port = int(str(ready["port"]))
    settings = CycleSettings(overrides={n: HostOverride(a, port, "lanes") for n, a in addresses.items()})
    transport = SSHTransport(Path(str(ready["known_hosts"])), [Path(str(ready["client_key"]))])
    (work / "secrets").mkdir(exist_ok=True)
    runner = CycleRunner(transport, Store(work / "state.db"), SecretStore(work / "secrets"), settings)
    try:
        gc.collect()
        tracemalloc.start(1)  # one frame: 10 made a 1,000-host cycle several times slower
        base = tracemalloc.take_snapshot()
        for name in ("first cycle (installs)", "no-op cycle"):
            tracemalloc.reset_peak()
            result = await runner.observe_and_plan(loaded)
            _, peak = tracemalloc.get_traced_memory()
            del result
            gc.collect()
            now, _ = tracemalloc.get_traced_memory()
            print(f"{name:24s} peak traced {peak / MB:7.1f} MB, held after it {now / MB:7.1f} MB")
        end = tracemalloc.take_snapshot()
        print(f"\nheld at the end, by allocation site (grown since before the first cycle), top {top}:")
        for stat in end.compare_to(base, "lineno")[:top]:
            print(f"  {stat.size_diff / MB:7.2f} MB  {stat.count_diff:>8d} blocks  {stat.traceback[0]}")
    finally:
        tracemalloc.stop()
        await transport.close()
        runner.store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lanes-cyclemem-"))
    fleet = None
    try:
        repo = build_repo(tmp / "state-repo", args.hosts)
        fleet = FleetProcess(fleet_spec(load_commit(repo), tmp / "sim", loopback_base(3)), tmp / "sim")
        ready = fleet.start()
        asyncio.run(cycles(repo, ready, tmp, args.top))
    finally:
        if fleet is not None:
            fleet.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
