"""Staging through real rsync, ssh-agent and the model check, with `ssh` standing in for the network hop.

Hosts are folders (`stagingworld.py`); the figures expected are computed here from the files written.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from reconciler.execute.staging import CONTROL_NODE, StageOrigin, StageProgress, StageReport, StagingError, stage
from reconciler.transport.local import LocalTransport
from tests.support.stagingworld import (
    SmallDisk,
    Staging,
    gone,
    manifest_of,
    relay_processes,
    rsync_missing,
    tree_digest,
    write_tree,
)

pytestmark = [pytest.mark.timeout(90), pytest.mark.skipif(rsync_missing(), reason="rsync is not installed")]

FILES = {
    "config.json": b'{"architectures": ["X"]}\n',
    "model-00001-of-00003.safetensors": os.urandom(3 << 20),
    "model-00002-of-00003.safetensors": os.urandom(2 << 20),
    "model-00003-of-00003.safetensors": os.urandom(1 << 20),
    "tokenizer/tokenizer.json": os.urandom(100_000),
}
MANIFEST = manifest_of(FILES)
WANT = {f.path: f.sha256 for f in MANIFEST.files}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Staging:
    w = Staging(tmp_path)
    for k, v in w.env().items():
        monkeypatch.setenv(k, v)
    return w


def origin_folder(world: Staging, files: dict[str, bytes] = FILES) -> Path:
    folder = world.tmp / "nas" / "X"
    write_tree(folder, files)
    return folder


async def run_stage(world: Staging, names: list[str], origin: StageOrigin, transport: LocalTransport | None = None,
                    **kw: Any) -> StageReport:  # fmt: skip
    targets = {n: world.hosts[n] for n in names}
    return await stage(targets, "X", MANIFEST, origin, key=world.key, known_hosts=world.known_hosts,
                       transport=transport or LocalTransport(), io_timeout_s=10, **kw)  # fmt: skip


async def test_three_hosts_from_a_control_node_folder_the_origin_sends_the_model_once(world: Staging) -> None:
    for i, name in enumerate(("a", "b", "c"), start=1):
        world.host(name, i)
    events: list[StageProgress] = []
    origin = StageOrigin.local(str(origin_folder(world)))

    report = await stage({n: world.hosts[n] for n in "abc"}, "X", MANIFEST, origin, key=world.key,
                         known_hosts=world.known_hosts, transport=LocalTransport(), parallel=2,
                         progress=events.append, lane="prod", io_timeout_s=10)  # fmt: skip

    for name in "abc":
        assert tree_digest(world.root(name), list(WANT)) == WANT, name
    # Round 1 the control node seeds a; round 2 a feeds b; round 3 a feeds c (b finds no one left).
    assert [[(s, r) for s, r in rnd] for rnd in report.plan.feeds()] == [[(CONTROL_NODE, "a")], [("a", "b")],
                                                                          [("a", "c")]]  # fmt: skip
    total = MANIFEST.total
    assert total <= report.sent_by[CONTROL_NODE] < total * 1.02  # the model once, plus rsync's protocol
    assert 2 * total <= report.sent_by["a"] < 2 * total * 1.02
    assert set(report.copied) == {"a", "b", "c"} and report.copied["b"] == tuple(sorted(FILES))
    assert all(c.complete for c in report.checks.values())
    # Host-to-host copies: ssh -A to the sender with an agent holding exactly our key, then the sender's ssh to
    # the receiver's data-plane address, checked against the receiver's pinned key (its SSH address).
    calls = world.calls()
    outer = [c for c in calls if "-A" in c["argv"]]
    assert outer and all(c["host"] == "10.99.0.1" for c in outer)  # a (the only sender besides us)
    assert all(len(c["agent_keys"]) == 1 and "lanes-test" in c["agent_keys"][0] for c in outer)
    inner = [c for c in calls if c["host"] in ("10.98.0.2", "10.98.0.3")]
    assert len(inner) == 2 * 2  # two receivers, their files split into two rsyncs each (parallel=2)
    for c in inner:
        alias = "HostKeyAlias=10.99.0.2" if c["host"] == "10.98.0.2" else "HostKeyAlias=10.99.0.3"
        assert alias in c["argv"] and "StrictHostKeyChecking=yes" in c["argv"]
    # The agent is gone after the run, its folder too.
    socks = {str(c["sock"]) for c in outer}
    assert len(socks) == 1 and all(gone(Path(s).parent) for s in socks)
    # Progress: per receiver, bytes never go back and end at its total; the verify phase follows the copy.
    for name in "abc":
        mine = [e for e in events if e.host == name and e.phase == "copy"]
        assert mine and mine[-1].bytes_done == mine[-1].bytes_total == total
        assert [e.bytes_done for e in mine] == sorted(e.bytes_done for e in mine)
        assert all(e.lane == "prod" for e in mine)
        assert any(e.host == name and e.phase == "verify" for e in events)


async def test_a_flipped_byte_is_repaired_from_a_holder_and_the_origin_sends_nothing(world: Staging) -> None:
    for i, name in enumerate(("a", "b"), start=1):
        world.host(name, i)
    origin = StageOrigin.local(str(origin_folder(world)))
    await run_stage(world, ["a", "b"], origin)
    target = world.root("b") / "model-00002-of-00003.safetensors"
    before = target.stat()
    with target.open("r+b") as f:
        f.seek(777)
        f.write(bytes([FILES[target.name][777] ^ 1]))
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and mtime as they were

    report = await run_stage(world, ["a", "b"], origin)

    assert tree_digest(world.root("b"), list(WANT)) == WANT
    assert report.plan.feeds() == ((("a", "b"),),)
    assert report.sent_by.get(CONTROL_NODE, 0) == 0
    assert report.copied == {"b": ("model-00002-of-00003.safetensors",)}
    # rsync's delta algorithm sends the block around the flipped byte, not the 2 MiB file
    assert report.sent_by["a"] < (2 << 20) // 4


async def test_a_host_short_of_disk_is_refused_before_anything_is_copied(world: Staging) -> None:
    for i, name in enumerate(("a", "b", "c"), start=1):
        world.host(name, i)
    origin = StageOrigin.local(str(origin_folder(world)))
    total = MANIFEST.total
    transport = SmallDisk({"c": total - 1})

    with pytest.raises(StagingError) as caught:
        await run_stage(world, ["a", "b", "c"], origin, transport)

    err = caught.value
    assert err.host == "c" and not err.transient and err.step == "stage" and not err.touched
    assert f"c needs {total} bytes" in str(err) and f"has {total - 1} free" in str(err)
    assert "nothing copied" in str(err)
    assert world.calls() == [], "no rsync, no ssh"
    assert not any(world.root(n).exists() for n in "abc")
    assert sorted(transport.checks) == ["a", "b", "c"]


async def test_a_partial_in_the_partial_folder_counts_against_the_space_needed(world: Staging) -> None:
    world.host("a", 1)
    origin = StageOrigin.local(str(origin_folder(world)))
    big = "model-00001-of-00003.safetensors"
    partial = world.root("a") / ".lanes-partial" / big
    partial.parent.mkdir(parents=True)
    partial.write_bytes(FILES[big][: 1 << 20])
    # It needs the whole model less the 1 MiB rsync will resume from: exactly that much free is enough.
    transport = SmallDisk({"a": MANIFEST.total - (1 << 20)})

    report = await run_stage(world, ["a"], origin, transport)

    assert tree_digest(world.root("a"), list(WANT)) == WANT
    assert report.sent_by[CONTROL_NODE] < MANIFEST.total - (1 << 20) // 2
    assert not partial.exists()


async def test_a_file_the_origin_lacks_fails_naming_host_and_file_before_any_byte_is_sent(world: Staging) -> None:
    world.host("a", 1)
    files = dict(FILES)
    del files["tokenizer/tokenizer.json"]
    origin = StageOrigin.local(str(origin_folder(world, files)))

    with pytest.raises(StagingError) as caught:
        await run_stage(world, ["a"], origin)

    err = caught.value
    assert err.host == "a" and err.file == "tokenizer/tokenizer.json" and not err.transient
    assert "cannot be read (No such file or directory); nothing is sent" in str(err), str(err)
    assert "; also:" not in str(err)  # checked once for every transfer, said once
    assert not any(p.is_file() for p in world.root("a").rglob("*"))  # the control node's files are checked first


async def test_a_control_node_file_unlike_the_manifest_fails_before_any_byte_leaves(world: Staging) -> None:
    world.host("a", 1)
    files = dict(FILES)
    files["config.json"] = b'{"architectures": ["Y"]}\n'  # same size, other bytes: the origin is not the manifest
    origin = StageOrigin.local(str(origin_folder(world, files)))

    with pytest.raises(StagingError) as caught:
        await run_stage(world, ["a"], origin)

    err = caught.value
    assert err.host == "a" and err.file == "config.json" and not err.transient
    assert f"config.json in the origin {origin.path} on the control node" in str(err), str(err)
    assert "sha256 differs from the manifest's; nothing is sent" in str(err)
    assert not any(p.is_file() for p in world.root("a").rglob("*"))


async def test_a_spark_origin_that_does_not_hold_the_model_is_refused(world: Staging) -> None:
    holder = world.host("h", 1)
    world.host("a", 2)
    write_tree(Path(holder.root), {k: v for k, v in FILES.items() if k != "config.json"})

    with pytest.raises(StagingError, match=r"h: the origin of X does not hold it: 1 files .*config\.json"):
        await run_stage(world, ["a"], StageOrigin.from_spark(holder))
    assert world.calls() == []


async def test_a_spark_holding_the_model_feeds_the_others(world: Staging) -> None:
    holder = world.host("h", 1)
    write_tree(Path(holder.root), FILES)
    world.host("a", 2)
    world.host("b", 3, data_plane=False)  # no data plane: h reaches it on its SSH address

    report = await run_stage(world, ["a", "b"], StageOrigin.from_spark(holder))

    # h reaches both (an origin reaches every host on its SSH address); a and b cannot talk (b has no data plane)
    assert report.plan.feeds() == ((("h", "a"),), (("h", "b"),))
    assert report.sent_by["h"] >= 2 * MANIFEST.total
    for name in "ab":
        assert tree_digest(world.root(name), list(WANT)) == WANT
    hosts = {c["host"] for c in world.calls() if "-A" not in c["argv"]}
    assert "10.98.0.2" in hosts and "10.99.0.3" in hosts


async def test_cancelling_kills_the_copy_and_its_children(world: Staging, monkeypatch: pytest.MonkeyPatch) -> None:
    world.host("a", 1)
    origin = StageOrigin.local(str(origin_folder(world)))
    monkeypatch.setenv("FAKE_SSH_HANG", "rsync --server")  # the receiving end never answers

    task = asyncio.create_task(run_stage(world, ["a"], origin))
    for _ in range(200):
        if world.calls():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    pids = [int(str(c["pid"])) for c in world.calls()]
    assert pids
    for _ in range(100):
        if all(gone(f"/proc/{pid}") for pid in pids):
            break
        await asyncio.sleep(0.1)
    assert [pid for pid in pids if not gone(f"/proc/{pid}")] == []


async def test_an_origin_of_links_to_blobs_sends_the_files(world: Staging) -> None:
    # A Hugging Face cache snapshot: each file a symlink into blobs/. Receivers get files, not dangling links.
    world.host("a", 1)
    blobs = world.tmp / "hf" / "blobs"
    snapshot = world.tmp / "hf" / "snapshots" / "abc123"
    write_tree(blobs, {f.sha256: FILES[f.path] for f in MANIFEST.files})
    for f in MANIFEST.files:
        (snapshot / f.path).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / f.path).symlink_to(blobs / f.sha256)

    # Links may lead anywhere under the origin's root (the cache), never out of it.
    await run_stage(world, ["a"], StageOrigin.local(str(snapshot), root=str(world.tmp / "hf")))

    assert tree_digest(world.root("a"), list(WANT)) == WANT
    assert not any((world.root("a") / p).is_symlink() for p in WANT)


async def test_a_control_node_file_linking_out_of_the_origins_root_sends_nothing(world: Staging) -> None:
    world.host("a", 1)
    outside = world.tmp / "outside"
    write_tree(outside, FILES)
    folder = world.tmp / "root" / "X"
    write_tree(folder, {p: d for p, d in FILES.items() if p != "config.json"})
    (folder / "config.json").symlink_to(outside / "config.json")

    with pytest.raises(StagingError, match=r"config\.json .* resolves to .*outside.*; nothing is sent"):
        await run_stage(world, ["a"], StageOrigin.local(str(folder), root=str(world.tmp / "root")))
    assert not any(p.is_file() for p in world.root("a").rglob("*"))


async def test_cancelling_a_host_to_host_copy_stops_the_senders_rsync_too(
    world: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = world.host("h", 1)
    write_tree(Path(holder.root), FILES)
    world.host("a", 2)
    monkeypatch.setenv("FAKE_SSH_HANG", "rsync --server")  # the receiving end never answers

    task = asyncio.create_task(run_stage(world, ["a"], StageOrigin.from_spark(holder)))
    for _ in range(200):  # the relay's rsync has started its ssh to the receiver
        if any(c["host"] == "10.98.0.2" for c in world.calls()):
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    calls = world.calls()
    assert any(c["host"] == "10.98.0.2" for c in calls) and any("-A" in c["argv"] for c in calls)
    # the outer ssh (and the relay it ran), and the sender's rsync's ssh to the receiver: gone within the
    # grace periods (the relay's SIGTERM to rsync's group, ours to the outer ssh's), even on a loaded machine
    for _ in range(100):
        left = [c for c in calls if not gone(f"/proc/{c['pid']}")]
        if not left and not relay_processes(world.log):
            break
        await asyncio.sleep(0.1)
    assert not left, [c["argv"][:3] for c in left]
    assert not relay_processes(world.log), "no relay or rsync left behind"
