"""Staging a model on the rig: throughput against a bare rsync of the same files, and the origin's bytes.

    .venv/bin/python bench/staging.py [--mib 512] [--repeats 3] [--json]

As root on Debian 12. Builds the rig of tests/rig, gives every host a models folder of its own (a tmpfs in
its sshd's mount namespace, `Rig.own_models`), generates a checkpoint of 8 files of random bytes and lays it
in rig4's folder (rig4 is the origin host, a NAS), then measures:

1. Throughput, one receiver (rig1), each way staging copies:
   - host to host: staging from rig4 against a bare `rsync -a SRC/ root@rig1-data-plane:DST/` run on rig4
     (through `ssh -A`, as staging does), rig1's folder emptied before each run;
   - from the control node: staging from a folder here against a bare `rsync -a` from here.
   Staging's time is the whole call (checks before and after, agent, rsync); the ratio is bare seconds over
   staging seconds (staging's throughput as a fraction of bare rsync's; goal >= 0.9), medians of the repeats,
   the two sides of each pair taking turns to go first.
2. Bytes the origin sends to stage rig1-3: with the fan-out (hosts on the data plane feed each other;
   goal about one model size) and without it (no pair can talk: three model sizes).

Not a test: it prints numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/rig is the rig's code

from reconciler.execute.sshagent import agent_env, private_agent  # noqa: E402
from reconciler.execute.staging import StageHost, StageOrigin, stage  # noqa: E402
from reconciler.execute.subproc import run_streaming  # noqa: E402
from reconciler.transport.ssh import SSHTransport  # noqa: E402
from tests.rig.rig import Rig, running_rig  # noqa: E402
from tests.rig.test_staging import Checkpoint, Entry  # noqa: E402

MB = 1 << 20
MODEL = "benchstage"
NO_PIN = "ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


def make_checkpoint(folder: Path, mib: int) -> Checkpoint:
    """8 files: config, tokenizer, index and five shards splitting `mib` MiB as 8:6:5:4:2 (like real shards)."""
    import hashlib

    folder.mkdir(parents=True)
    parts = (8, 6, 5, 4, 2)
    sizes = {f"model-{i:05d}-of-00005.safetensors": mib * MB * p // sum(parts) for i, p in enumerate(parts, 1)}
    entries = []
    for name, size in {"config.json": 300, "tokenizer.json": MB, "model.safetensors.index.json": 4096,
                       **sizes}.items():  # fmt: skip
        h = hashlib.sha256()
        with (folder / name).open("wb") as f:
            left = size
            while left:
                block = os.urandom(min(left, 8 * MB))
                f.write(block)
                h.update(block)
                left -= len(block)
        entries.append(Entry(name, size, h.hexdigest()))
    return Checkpoint(folder, tuple(sorted(entries, key=lambda e: e.path)))


def host(rig: Rig, name: str) -> StageHost:
    h = rig.hosts[name]
    return StageHost(name, h.address, str(rig.models_root / MODEL), data_address=h.fabric_address)


def empty(rig: Rig, *names: str) -> None:
    for name in names:
        rig.in_mounts(name, ["rm", "-rf", str(rig.models_root / MODEL)])


PHASES: dict[str, list[dict[str, float]]] = {}


async def timed_stage(rig: Rig, ckpt: Checkpoint, names: list[str], origin: StageOrigin, **kw: Any
                      ) -> tuple[float, dict[str, int]]:  # fmt: skip
    transport = SSHTransport(rig.known_hosts, [rig.client_key])
    t0 = time.monotonic()
    try:
        report = await stage({n: host(rig, n) for n in names}, MODEL, ckpt, origin, key=rig.client_key,
                             known_hosts=rig.known_hosts, transport=transport, **kw)  # fmt: skip
    finally:
        await transport.close()
    PHASES.setdefault(f"{origin.name}->{','.join(names)}", []).append(dict(report.phases))
    return time.monotonic() - t0, dict(report.sent_by)


async def bare_host_to_host(rig: Rig) -> float:
    """`rsync -a` on rig4 to rig1's data-plane address, through ssh -A (the person's way of doing the same)."""
    rsh = NO_PIN
    root = str(rig.models_root / MODEL)
    remote = f"rsync -a -e '{rsh}' {root}/ root@{rig.hosts['rig1'].fabric_address}:{root}/"
    async with private_agent(rig.client_key, lifetime_s=600) as sock:
        argv = ["ssh", "-A", "-F", "/dev/null", "-i", str(rig.client_key), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={rig.known_hosts}", "-o", "BatchMode=yes",
                f"root@{rig.hosts['rig4'].address}", remote]  # fmt: skip
        t0 = time.monotonic()
        done = await run_streaming(argv, timeout=600, env=agent_env(sock))
    if done.returncode != 0:
        raise SystemExit(f"bare rsync failed: {done.stderr}")
    return time.monotonic() - t0


async def bare_from_here(rig: Rig, ckpt: Checkpoint) -> float:
    rsh = (f"ssh -F /dev/null -i {rig.client_key} -o IdentitiesOnly=yes -o UserKnownHostsFile={rig.known_hosts} "
           "-o BatchMode=yes")  # fmt: skip
    dest = f"root@{rig.hosts['rig1'].address}:{rig.models_root / MODEL}/"
    t0 = time.monotonic()
    done = await run_streaming(["rsync", "-a", "-e", rsh, f"{ckpt.folder}/", dest], timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"bare rsync failed: {done.stderr}")
    return time.monotonic() - t0


async def measure(rig: Rig, mib: int, repeats: int, parallel: int) -> dict[str, Any]:
    ckpt = make_checkpoint(rig.folder / "bench-checkpoint", mib)
    tmpfs = int(mib * 1.3) + 64
    for name in ("rig1", "rig2", "rig3", "rig4"):
        rig.own_models(name, tmpfs)
    rig.in_mounts("rig4", ["mkdir", "-p", str(rig.models_root / MODEL)])
    rig.in_mounts("rig4", ["cp", "-a", f"{ckpt.folder}/.", str(rig.models_root / MODEL)])
    nas = StageOrigin.remote(host(rig, "rig4"), str(rig.models_root / MODEL))
    here = StageOrigin.local(str(ckpt.folder))
    runs: dict[str, list[float]] = {k: [] for k in ("stage_h2h", "bare_h2h", "stage_here", "bare_here")}

    async def one(kind: str) -> float:
        empty(rig, "rig1")
        if kind == "bare_h2h":
            return await bare_host_to_host(rig)
        if kind == "stage_h2h":
            return (await timed_stage(rig, ckpt, ["rig1"], nas, parallel=parallel))[0]
        if kind == "bare_here":
            return await bare_from_here(rig, ckpt)
        return (await timed_stage(rig, ckpt, ["rig1"], here, parallel=parallel))[0]

    for i in range(repeats):
        # Each pair in turn, the order swapped every repeat: neither side always runs first.
        for pair in (("bare_h2h", "stage_h2h"), ("bare_here", "stage_here")):
            for kind in pair if i % 2 == 0 else pair[::-1]:
                runs[kind].append(await one(kind))
    med = {k: statistics.median(v) for k, v in runs.items()}
    total = ckpt.total
    empty(rig, "rig1", "rig2", "rig3")
    fan_s, fan_sent = await timed_stage(rig, ckpt, ["rig1", "rig2", "rig3"], nas, parallel=parallel)
    empty(rig, "rig1", "rig2", "rig3")
    flat_s, flat_sent = await timed_stage(rig, ckpt, ["rig1", "rig2", "rig3"], nas, pairs=[], parallel=parallel)
    return {
        "model_bytes": total,
        "files": len(ckpt.files),
        "repeats": repeats,
        "parallel": parallel,
        "seconds_median": {k: round(v, 3) for k, v in med.items()},
        "throughput_MBps": {k: round(total / v / 1e6, 1) for k, v in med.items()},
        "ratio_host_to_host_vs_bare": round(med["bare_h2h"] / med["stage_h2h"], 3),
        "ratio_from_control_node_vs_bare": round(med["bare_here"] / med["stage_here"], 3),
        "staging_phases_median_s": {
            k: {p: round(statistics.median(r[p] for r in rs), 3) for p in rs[0]} for k, rs in PHASES.items()
        },
        "three_hosts_fanout": {"seconds": round(fan_s, 2), "origin_bytes": fan_sent.get("rig4", 0),
                               "origin_model_sizes": round(fan_sent.get("rig4", 0) / total, 3), "sent_by": fan_sent},
        "three_hosts_no_fanout": {"seconds": round(flat_s, 2), "origin_bytes": flat_sent.get("rig4", 0),
                                  "origin_model_sizes": round(flat_sent.get("rig4", 0) / total, 3),
                                  "sent_by": flat_sent},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="checkpoint size in MiB (default 512)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=4, help="rsyncs into one receiver at once (default 4)")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args()
    with running_rig() as rig:
        out = asyncio.run(measure(rig, args.mib, args.repeats, args.parallel))
    if args.json:
        print(json.dumps(out))
        return
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
