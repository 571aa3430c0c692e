"""Staging a model onto rig hosts that each have a models folder of their own (a tmpfs in their sshd's mount
namespace: `Rig.own_models`), so every copy is a real copy over real sshd, rsync and ssh-agent.

A generated checkpoint (8 files, about 200 MB of random bytes, made once per module) is staged to three hosts
from a fourth over the data plane, with a link cut mid-copy and resumed, a flipped byte repaired, and a host
whose disk is too small refused before anything moves. Expected figures come from the files written here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reconciler.execute.staging import CONTROL_NODE, StageHost, StageOrigin, StageProgress, StageReport, StagingError
from reconciler.execute.staging import stage as run_staging
from reconciler.facts.modelcheck import ModelCheck, check_input, modelcheck_argv, parse_model_check
from reconciler.facts.relay_script import RELAY_MARKER
from reconciler.transport.ssh import SSHTransport
from tests.rig.machine import RigError, process_cmdlines, sh
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(120)]

MB = 1 << 20
SHARDS = (64, 48, 40, 32, 16)  # MiB
TMPFS_MB = 300  # room for the checkpoint (~201 MiB) and what rsync keeps aside while it writes
SMALL_TMPFS_MB = 128
MODEL = "stagetest"

HASH_TREE = r"""
import hashlib, json, os, sys
root = sys.argv[1]
out = {}
for here, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d != ".lanes-partial"]
    for name in files:
        full = os.path.join(here, name)
        rel = os.path.relpath(full, root)
        if rel == ".lanes-verified.json":
            continue
        h = hashlib.sha256()
        with open(full, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        out[rel] = h.hexdigest()
print(json.dumps(out))
"""

FLIP_BYTE = r"""
import os, sys
path, at = sys.argv[1], int(sys.argv[2])
st = os.stat(path)
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0xFF]))
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
"""


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    files: tuple[Entry, ...]

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def digests(self) -> dict[str, str]:
        return {f.path: f.sha256 for f in self.files}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    folder = tmp_path_factory.mktemp("checkpoint")
    contents: dict[str, bytes] = {
        "config.json": json.dumps({"architectures": ["StageTestForCausalLM"], "n": 1}).encode(),
        "tokenizer.json": os.urandom(MB),
    }
    for i, mib in enumerate(SHARDS, start=1):
        contents[f"model-{i:05d}-of-{len(SHARDS):05d}.safetensors"] = os.urandom(mib * MB)
    index = {"weight_map": {f"layer.{i}": name for i, name in enumerate(sorted(contents)) if "safetensors" in name}}
    contents["model.safetensors.index.json"] = json.dumps(index).encode()
    entries = []
    for path, data in sorted(contents.items()):
        (folder / path).write_bytes(data)
        entries.append(Entry(path, len(data), hashlib.sha256(data).hexdigest()))
    return Checkpoint(folder, tuple(entries))


def root_of(rig: Rig) -> Path:
    return rig.models_root / MODEL


def stage_host(rig: Rig, name: str) -> StageHost:
    h = rig.hosts[name]
    return StageHost(name=name, address=h.address, root=str(root_of(rig)), data_address=h.fabric_address)


async def stage(rig: Rig, ckpt: Checkpoint, names: list[str], origin: StageOrigin, **kw: Any) -> StageReport:
    transport = SSHTransport(rig.known_hosts, [rig.client_key])
    try:
        return await run_staging({n: stage_host(rig, n) for n in names}, MODEL, ckpt, origin, key=rig.client_key,
                                 known_hosts=rig.known_hosts, transport=transport, **kw)  # fmt: skip
    finally:
        await transport.close()


def held(rig: Rig, host: str) -> dict[str, str]:
    """sha256 of every file under the model's folder on a host, as the host itself reads them."""
    out = rig.ssh(host, ["python3", "-c", HASH_TREE, str(root_of(rig))], timeout=60).stdout
    got: dict[str, str] = json.loads(out)
    return got


def check(rig: Rig, ckpt: Checkpoint, host: str) -> ModelCheck:
    stdin = check_input(str(root_of(rig)), [(f.path, f.size, f.sha256) for f in ckpt.files])
    return parse_model_check(sh(rig.ssh_argv(host, modelcheck_argv()), input=stdin, timeout=60).stdout)


def origin_on_rig4(rig: Rig, ckpt: Checkpoint) -> StageOrigin:
    """rig4 as the origin host (a NAS holding the checkpoint), with a models folder of its own."""
    rig.own_models("rig4", TMPFS_MB)
    rig.in_mounts("rig4", ["mkdir", "-p", str(root_of(rig))])
    rig.in_mounts("rig4", ["cp", "-a", f"{ckpt.folder}/.", str(root_of(rig))])
    return StageOrigin.remote(stage_host(rig, "rig4"), str(root_of(rig)))


async def test_a_checkpoint_staged_to_three_hosts_from_a_fourth_is_sent_by_it_once(
    rig: Rig, checkpoint: Checkpoint
) -> None:
    origin = origin_on_rig4(rig, checkpoint)
    for name in ("rig1", "rig2", "rig3"):
        rig.own_models(name, TMPFS_MB)
    assert held(rig, "rig1") == {}, "each host's models folder is its own: rig4's files are not there"

    report = await stage(rig, checkpoint, ["rig1", "rig2", "rig3"], origin, parallel=2)

    for name in ("rig1", "rig2", "rig3"):
        assert held(rig, name) == checkpoint.digests, name
    # rig4 seeds rig1 (round 1), rig1 feeds rig2 (round 2), then rig3 (round 3).
    assert report.plan.feeds() == ((("rig4", "rig1"),), (("rig1", "rig2"),), (("rig1", "rig3"),))
    total = checkpoint.total
    assert total <= report.sent_by["rig4"] < total * 1.01, report.sent_by  # the model once, and rsync's protocol
    assert 2 * total <= report.sent_by["rig1"] < 2 * total * 1.01
    assert CONTROL_NODE not in report.sent_by
    # Host to host on the data plane: each receiver's sshd saw its sender's data-plane address.
    for receiver, sender in (("rig1", "rig4"), ("rig2", "rig1"), ("rig3", "rig1")):
        log = rig.hosts[receiver].sshd_log.read_text()
        assert f"Accepted publickey for root from {rig.hosts[sender].fabric_address} " in log, receiver
    print(f"staged {total / MB:.0f} MiB to 3 hosts in {report.seconds:.1f} s; sent by {report.sent_by}")


async def test_a_link_cut_mid_copy_fails_naming_the_host_and_the_next_run_resumes(
    rig: Rig, checkpoint: Checkpoint
) -> None:
    rig.own_models("rig1", TMPFS_MB)
    rig.slow_link("rig1", 400)  # ~50 MB/s: the copy lasts seconds, long enough to cut it midway
    origin = StageOrigin.local(str(checkpoint.folder))
    total = checkpoint.total
    cut_at: list[int] = []

    def watch(p: StageProgress) -> None:
        if not cut_at and p.host == "rig1" and p.bytes_done > total * 0.3:
            cut_at.append(p.bytes_done)
            rig.cut_link("rig1")

    with pytest.raises(StagingError) as caught:
        await stage(rig, checkpoint, ["rig1"], origin, progress=watch, io_timeout_s=3)

    err = caught.value
    assert cut_at, "the copy was cut while it ran"
    assert err.host == "rig1" and err.transient and not err.touched, str(err)
    assert str(err).startswith(f"rig1: copying {MODEL} from {CONTROL_NODE} failed: rsync exit"), str(err)
    rig.set_link("rig1", True)
    rig.unslow_link("rig1")
    # The receiving rsync times out on its own (it has --timeout too) and keeps what it had in .lanes-partial.
    kept = 0
    before: ModelCheck | None = None
    for _ in range(100):
        try:
            before = check(rig, checkpoint, "rig1")
        except RigError:  # the restored cable may take a moment to carry a new connection
            await asyncio.sleep(0.2)
            continue
        kept = sum(f.partial_bytes for f in before.files.values()) + sum(
            f.size for f in before.files.values() if f.state == "ok"
        )
        if any(f.partial_bytes for f in before.files.values()):
            break
        await asyncio.sleep(0.2)
    assert kept > total * 0.1, before

    report = await stage(rig, checkpoint, ["rig1"], origin, io_timeout_s=3)

    assert held(rig, "rig1") == checkpoint.digests
    assert report.sent_by[CONTROL_NODE] < total - kept * 0.9, (report.sent_by, kept, total)
    print(f"cut at {cut_at[0] / MB:.0f} MiB; kept {kept / MB:.0f} MiB; resumed sending "
          f"{report.sent_by[CONTROL_NODE] / MB:.0f} of {total / MB:.0f} MiB")  # fmt: skip


async def test_a_flipped_byte_on_one_host_is_found_and_repaired_from_a_holder(rig: Rig, checkpoint: Checkpoint) -> None:
    for name in ("rig1", "rig2"):
        rig.own_models(name, TMPFS_MB)
    origin = StageOrigin.local(str(checkpoint.folder))
    await stage(rig, checkpoint, ["rig1", "rig2"], origin)
    shard = "model-00002-of-00005.safetensors"
    rig.ssh("rig2", ["python3", "-c", FLIP_BYTE, str(root_of(rig) / shard), str(7 * MB + 3)])

    found = check(rig, checkpoint, "rig2")
    assert {p: f.state for p, f in found.files.items() if f.state != "ok"} == {shard: "mismatch"}
    assert found.hashed == (shard,), "the stamp spared the unchanged files"
    report = await stage(rig, checkpoint, ["rig1", "rig2"], origin)

    assert held(rig, "rig2") == checkpoint.digests
    assert report.plan.feeds() == ((("rig1", "rig2"),),)  # a holder repairs it; the origin sends nothing
    assert report.copied == {"rig2": (shard,)}
    assert report.sent_by["rig1"] < 2 * MB, report.sent_by  # the blocks around the byte, not the 48 MiB shard


async def test_a_host_whose_disk_is_too_small_is_refused_before_any_copy(rig: Rig, checkpoint: Checkpoint) -> None:
    for name in ("rig1", "rig2"):
        rig.own_models(name, TMPFS_MB)
    rig.own_models("rig3", SMALL_TMPFS_MB)
    origin = StageOrigin.local(str(checkpoint.folder))

    with pytest.raises(StagingError) as caught:
        await stage(rig, checkpoint, ["rig1", "rig2", "rig3"], origin)

    err = caught.value
    free = SMALL_TMPFS_MB * MB  # an empty tmpfs of that size: every block free
    assert err.host == "rig3" and not err.transient
    assert f"rig3 needs {checkpoint.total} bytes" in str(err) and f"has {free} free" in str(err), str(err)
    for name in ("rig1", "rig2", "rig3"):
        assert rig.ssh(name, ["test", "-e", str(root_of(rig))], check=False).returncode == 1, name


def senders(rig: Rig, since: set[int]) -> list[str]:
    """What runs of a host-to-host copy's sending side: the relay, its rsync and that rsync's ssh to the
    receiver (hosts share this machine's pids), among processes not in `since` (those of earlier tests).
    The receiver's `rsync --server` is not counted."""
    root = str(root_of(rig))
    found = []
    for pid, cmd in process_cmdlines().items():
        if pid in since:
            continue
        argv0 = os.path.basename(cmd.split(" ", 1)[0])
        if RELAY_MARKER in cmd or (argv0 in ("rsync", "ssh") and root in cmd and not cmd.startswith("rsync --server")):
            found.append(cmd[:160])
    return found


async def test_a_cancelled_host_to_host_copy_leaves_nothing_running_on_the_sender(
    rig: Rig, checkpoint: Checkpoint
) -> None:
    # Over real sshd the relay learns that the control node went away only as sshd tells it: EOF on its stdin,
    # its stderr closed too. It must stop rsync then. Here rsync cannot end by itself: the receiver's cable is
    # cut, so it writes no progress (whose failed write would end it) and waits for its 60 s I/O timeout.
    origin = origin_on_rig4(rig, checkpoint)
    rig.own_models("rig1", TMPFS_MB)
    rig.slow_link("rig1", 80, fabric=True)  # ~10 MB/s into rig1 on the data plane: the copy lasts ~20 s
    total = checkpoint.total
    moving = asyncio.Event()

    def watch(p: StageProgress) -> None:
        if p.host == "rig1" and p.bytes_done > total * 0.05:
            moving.set()

    before = set(process_cmdlines())
    task = asyncio.create_task(stage(rig, checkpoint, ["rig1"], origin, progress=watch))
    await asyncio.wait_for(moving.wait(), 60)
    rig.set_fabric("rig1", False)
    assert any(cmd.startswith("rsync ") for cmd in senders(rig, before)), "rsync runs on rig4"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancelled = time.monotonic()
    left = senders(rig, before)
    while left and time.monotonic() - cancelled < 10:  # the relay's grace is 5 s before its SIGKILL
        await asyncio.sleep(0.1)
        left = senders(rig, before)
    assert not left, left
