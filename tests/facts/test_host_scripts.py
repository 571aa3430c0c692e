"""Run the probe and lease scripts for real with this machine's python3.

The scripts are strings the pure layer ships to hosts; these tests prove they
work as programs: PATH holds only a python3 link and, when a test wants one,
a fake `docker` that answers from canned outputs (and records its calls).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.facts.commands import lease_argv, probe_argv
from reconciler.facts.observed import Lease
from reconciler.facts.parse import parse_lease_output, parse_probe

pytestmark = pytest.mark.timeout(60)

MANAGED_IDS = ["9f" * 32, "7a" * 32]

FAKE_DOCKER = """\
#!{python}
import json, pathlib, sys
here = pathlib.Path(__file__).parent
with open(here / "calls.log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
answers = json.loads((here / "answers.json").read_text())
answer = answers.get(" ".join(sys.argv[1:]))
if answer is None:
    sys.stderr.write("fake docker: no answer for %r\\n" % sys.argv[1:])
    sys.exit(1)
sys.stdout.write(answer["stdout"])
sys.exit(answer.get("status", 0))
"""


def _inspect(cid: str, name: str, lane: str, rank: int, state: str, code: int) -> dict[str, object]:
    return {
        "Id": cid,
        "Name": "/" + name,
        "Image": "sha256:" + "1e" * 32,
        "Config": {
            "Image": "registry.lan:5000/vllm@sha256:" + "ab" * 32,
            "Labels": {
                "lanes.managed": "true",
                "lanes.lane": lane,
                "lanes.rank": str(rank),
                "lanes.spec": "h" + str(rank),
            },
        },
        "State": {
            "Status": state,
            "Running": state == "running",
            "ExitCode": code,
            "StartedAt": "2026-10-23T08:00:00Z",
        },
    }


def host_fact_errors() -> tuple[str, ...]:
    """What the probe says of the host facts this machine cannot give: the PATH of these tests holds
    python3 (and a fake docker) only, so no nvidia-smi; and no NVIDIA driver unless one is loaded here."""
    out = []
    if not (os.path.exists("/sys/module/nvidia/version") or os.path.exists("/proc/driver/nvidia/version")):
        out.append("nvidia driver: not loaded (no /sys/module/nvidia/version, no /proc/driver/nvidia/version)")
    out.append("nvidia-smi: not found")
    return tuple(out)


def _ps_line(cid: str, name: str, labels: str, state: str) -> str:
    return json.dumps({"ID": cid[:12], "Names": name, "Image": "some/image:tag", "Labels": labels, "State": state})


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    return bin_dir


def _fake_docker(bin_dir: Path, answers: dict[str, dict[str, object]]) -> None:
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.format(python=os.path.realpath(sys.executable)))
    docker.chmod(0o755)
    (bin_dir / "answers.json").write_text(json.dumps(answers))


def _run(bin_dir: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": str(bin_dir)}, check=False)


def _models(tmp_path: Path) -> dict[str, str]:
    plain = tmp_path / "models" / "plain"
    plain.mkdir(parents=True)
    (plain / "config.json").write_bytes(b"x" * 10)
    (plain / "model.safetensors").write_bytes(b"x" * 1000)
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"x" * 5000)
    (plain / "outside.bin").symlink_to(outside)  # points out of the tree: not counted
    repo = tmp_path / "models" / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "abc").write_bytes(b"x" * 500)
    (repo / "snapshots" / "rev").mkdir(parents=True)
    (repo / "snapshots" / "rev" / "model.safetensors").symlink_to("../../blobs/abc")
    single = tmp_path / "models" / "single.gguf"
    single.write_bytes(b"x" * 77)
    return {
        "plain": str(plain),
        "repo": str(repo),
        "snapshot": str(repo / "snapshots" / "rev"),
        "single": str(single),
        "missing": str(tmp_path / "models" / "nope"),
    }


def test_probe_script_runs_and_parses(tmp_path: Path, bin_dir: Path) -> None:
    ids = sorted(MANAGED_IDS)
    _fake_docker(
        bin_dir,
        {
            "ps -a --filter label=lanes.managed=true -q": {"stdout": "".join(i[:12] + "\n" for i in MANAGED_IDS)},
            "inspect " + " ".join(i[:12] for i in ids): {
                "stdout": json.dumps(
                    [
                        _inspect(MANAGED_IDS[0], "lane1-r0", "lane1", 0, "running", 0),
                        _inspect(MANAGED_IDS[1], "lane2-r1", "lane2", 1, "exited", 137),
                    ]
                )
            },
            "ps -a --format {{json .}}": {
                "stdout": "\n".join(
                    [
                        _ps_line(MANAGED_IDS[0], "lane1-r0", "lanes.lane=lane1,lanes.managed=true", "running"),
                        _ps_line(MANAGED_IDS[1], "lane2-r1", "lanes.managed=true,lanes.rank=1", "exited"),
                        _ps_line("55" * 32, "hand-started", "", "running"),
                    ]
                )
                + "\n"
            },
        },
    )
    models = _models(tmp_path)
    lease_file = tmp_path / "state" / "lease.json"
    lease_file.parent.mkdir()
    lease_file.write_text(json.dumps({"owner": "alice", "acquired": 1.0, "expires": 2.0}))
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        before = time.time()
        result = _run(bin_dir, probe_argv(list(models.values()), str(lease_file), str(tmp_path)))
    assert result.returncode == 0, result.stderr
    host = parse_probe("local", result.stdout)
    assert host.probe_errors == host_fact_errors()
    assert host.hostname == socket.gethostname()
    assert host.probed_at is not None
    assert before <= host.probed_at <= time.time()  # this machine's clock, read during the probe
    assert [(c.name, c.lane, c.rank, c.running, c.exit_code) for c in host.containers] == [
        ("lane1-r0", "lane1", 0, True, 0),
        ("lane2-r1", "lane2", 1, False, 137),
    ]
    assert [(u.name, u.state) for u in host.unmanaged] == [("hand-started", "running")]
    assert port in host.listening
    assert host.memory is not None
    assert host.memory.total_bytes > 0
    assert host.disk_total is not None
    assert host.disk_free is not None
    assert 0 < host.disk_free <= host.disk_total
    assert {k: (host.models[p].exists, host.models[p].bytes) for k, p in models.items()} == {
        "plain": (True, 1010),
        "repo": (True, 500),
        "snapshot": (True, 0),
        "single": (True, 77),
        "missing": (False, 0),
    }
    assert host.lease == Lease("alice", 1.0, 2.0)
    calls = [json.loads(line) for line in (bin_dir / "calls.log").read_text().splitlines()]
    assert [call[0] for call in calls] == ["ps", "inspect", "ps"]


def test_probe_without_docker_or_disk_still_reports(tmp_path: Path, bin_dir: Path) -> None:
    result = _run(bin_dir, probe_argv([str(tmp_path / "nope")], str(tmp_path / "no-lease.json"), "/no/such/disk"))
    assert result.returncode == 0, result.stderr
    host = parse_probe("local", result.stdout)
    assert host.containers == ()
    assert host.unmanaged == ()
    assert host.lease is None
    assert (host.disk_free, host.disk_total) == (None, None)
    assert host.memory is not None
    assert host.probe_errors == (
        "docker: not found",
        "disk /no/such/disk: No such file or directory",
        *host_fact_errors(),
    )


def test_probe_reports_failing_docker(tmp_path: Path, bin_dir: Path) -> None:
    _fake_docker(bin_dir, {})  # every call exits 1
    result = _run(bin_dir, probe_argv([], str(tmp_path / "lease.json"), str(tmp_path)))
    host = parse_probe("local", result.stdout)
    assert host.containers == ()
    assert [e.split(":")[0] for e in host.probe_errors] == ["docker ps", "docker ps"] + [
        e.split(":")[0] for e in host_fact_errors()
    ]
    assert "fake docker: no answer" in host.probe_errors[0]


def _lease(bin_dir: Path, action: str, path: Path, owner: str, ttl: int = 300) -> tuple[int, dict[str, object]]:
    result = _run(bin_dir, lease_argv(action, str(path), owner, ttl))  # type: ignore[arg-type]
    assert result.stderr == ""
    return result.returncode, json.loads(result.stdout)


def test_lease_script_acquire_renew_conflict_release(tmp_path: Path, bin_dir: Path) -> None:
    path = tmp_path / "var" / "lib" / "lanes" / "lease.json"
    status, out = _lease(bin_dir, "acquire", path, "alice")
    assert (status, out["ok"]) == (0, True)
    first = parse_lease_output(json.dumps(out)).lease
    assert first is not None
    assert first.owner == "alice"
    assert first.expires - first.acquired == pytest.approx(300)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    status, out = _lease(bin_dir, "acquire", path, "alice", ttl=600)
    renewed = parse_lease_output(json.dumps(out)).lease
    assert status == 0
    assert renewed is not None
    assert renewed.acquired == first.acquired
    assert renewed.expires > first.expires

    status, out = _lease(bin_dir, "acquire", path, "bob")
    assert (status, out["ok"]) == (3, False)
    assert parse_lease_output(json.dumps(out)).lease == renewed
    status, out = _lease(bin_dir, "release", path, "bob")
    assert (status, out["ok"]) == (3, False)
    assert path.exists()

    status, out = _lease(bin_dir, "release", path, "alice")
    assert (status, out) == (0, {"ok": True, "lease": None})
    assert not path.exists()
    status, out = _lease(bin_dir, "release", path, "alice")
    assert (status, out) == (0, {"ok": True, "lease": None})


def test_lease_script_takes_over_an_expired_lease(tmp_path: Path, bin_dir: Path) -> None:
    path = tmp_path / "lease.json"
    path.write_text(json.dumps({"owner": "crashed-daemon", "acquired": 1.0, "expires": time.time() - 1}))
    status, out = _lease(bin_dir, "acquire", path, "bob", ttl=60)
    assert (status, out["ok"]) == (0, True)
    lease = parse_lease_output(json.dumps(out)).lease
    assert lease is not None
    assert lease.owner == "bob"
    assert lease.acquired > 1.0


def test_lease_script_rejects_bad_usage(tmp_path: Path, bin_dir: Path) -> None:
    argv = lease_argv("acquire", str(tmp_path / "l.json"), "bob", 5)
    argv[5] = "steal"
    result = _run(bin_dir, argv)
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_probe_reports_this_machines_host_facts(tmp_path: Path, bin_dir: Path) -> None:
    """The host facts of the machine running the tests, each against what it says of itself."""
    model = tmp_path / "models" / "not-yet-downloaded"
    result = _run(bin_dir, probe_argv([str(model)], str(tmp_path / "lease.json"), str(tmp_path)))
    assert result.returncode == 0, result.stderr
    host = parse_probe("local", result.stdout)
    info = host.info
    assert info is not None
    uname = os.uname()
    assert (info.kernel, info.arch) == (uname.release, uname.machine)
    pretty = next(
        line.split("=", 1)[1].strip().strip('"')
        for line in Path("/etc/os-release").read_text().splitlines()
        if line.startswith("PRETTY_NAME=")
    )
    assert info.os_release == pretty
    # No nvidia-smi on this PATH: unknown, and said so; a loaded driver would still be read.
    assert (info.cuda_version, info.gpu_processes) == (None, None)
    assert "nvidia-smi: not found" in host.probe_errors
    if not Path("/sys/class/infiniband").exists():
        assert info.rdma == ()
    if not Path("/dev/infiniband").exists():
        assert info.rdma_char_devices == ()
    assert info.links is not None
    names = {lk.name for lk in info.links}
    assert names == set(os.listdir("/sys/class/net"))  # this process and sysfs share the root namespace here
    lo = info.link("lo")
    assert lo is not None and "127.0.0.1/8" in lo.ipv4 and lo.mtu == 65536
    for lk in info.links:
        assert lk.mtu == int(Path(f"/sys/class/net/{lk.name}/mtu").read_text())
        assert lk.operstate == Path(f"/sys/class/net/{lk.name}/operstate").read_text().strip()
    # A model that is not there yet is measured where it will land: its nearest existing parent.
    space = info.disks[str(model)]
    assert space.measured_at == str(tmp_path)
    st = os.statvfs(tmp_path)
    assert space.total == st.f_blocks * st.f_frsize
    assert 0 < space.free <= space.total
    assert set(info.disks) == {str(model), str(tmp_path)}
