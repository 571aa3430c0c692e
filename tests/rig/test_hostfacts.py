"""`lanes hosts` on the rig: the probe program runs for real on each host (sshd in its network namespace)
and reports that namespace's own links and addresses, and says what such a host lacks (no NVIDIA driver,
no nvidia-smi, no RDMA) instead of failing."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from reconciler.facts.probe_program import program_path
from reconciler.facts.probe_script import PROBE_SCRIPT
from tests.rig.fleet import quad_and_solo
from tests.rig.machine import sh
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]


def test_lanes_hosts_reports_each_namespace_as_it_is(rig: Rig) -> None:
    args = ["hosts", "--repo", str(rig.clone), "--known-hosts", str(rig.known_hosts), "--ssh-key", str(rig.client_key)]
    run = rig.lanes(*args, "--json")
    assert run.returncode == 0, run.describe()
    rows = {row["name"]: row for row in run.json()["hosts"]}
    assert sorted(rows) == sorted(rig.hosts)
    uname = os.uname()
    for name, host in rig.hosts.items():
        row = rows[name]
        info = row["info"]
        assert row["reachable"], row
        # The same machine under every host: its kernel and OS, no GPU and no RDMA, each said as unknown or none.
        assert (info["kernel"], info["arch"]) == (uname.release, uname.machine)
        assert info["os_release"]
        assert (info["driver_version"], info["cuda_version"], info["gpu_processes"]) == (None, None, None)
        assert "nvidia-smi: not found" in row["unknown"]
        assert (info["rdma"], info["rdma_char_devices"]) == ([], [])
        # The namespace's links, not the machine's: lo and the host's own veths, the SSH address on eth0.
        links = {lk["name"]: lk for lk in info["links"]}
        assert "lo" in links and not any(n.startswith("lrig") for n in links), sorted(links)
        assert links["eth0"]["operstate"] == "up"
        assert f"{host.address}/24" in links["eth0"]["ipv4"]
        # Every data-plane port the host file names is there, up, with its address.
        for port in row["data_plane"]:
            link = links[port["interface"]]
            assert link["operstate"] == "up", link
            assert any(ipaddress.ip_interface(a) == ipaddress.ip_interface(port["address"]) for a in link["ipv4"])
        assert row["blocks"] == []
        # Disk space under the HF cache, and under the model path when a lane of an earlier test names it.
        assert set(info["disks"]) <= {str(rig.hf_cache), str(rig.model_path)}, info["disks"]
        cache = info["disks"][str(rig.hf_cache)]
        assert cache["measured_at"] == str(rig.hf_cache) and 0 < cache["free"] <= cache["total"]

    text = rig.lanes(*args)
    assert text.returncode == 0, text.describe()
    first = sorted(rig.hosts)[0]
    assert text.stdout.startswith(f"{first} ({rig.hosts[first].address}): reachable")
    assert "driver unknown, CUDA unknown, compute processes: unknown" in " ".join(text.stdout.split())


def test_a_data_plane_link_down_keeps_the_lane_off_before_anything_runs(rig: Rig) -> None:
    """A rank host's fabric interface taken down (in its namespace, as `ip link set ... down` on a Spark):
    `lanes hosts` names it, and the plan blocks the multi-node lane with the reason, no step at all."""
    rig.publish(quad_and_solo(rig), "quad over rig1-4, solo on rig2")
    args = ["hosts", "--repo", str(rig.clone), "--known-hosts", str(rig.known_hosts), "--ssh-key", str(rig.client_key)]
    ports = {row["name"]: row["data_plane"] for row in rig.lanes(*args, "--json").json()["hosts"]}
    assert ports["rig3"], "the rig's host files name a data-plane port (a second veth per namespace)"
    iface = ports["rig3"][0]["interface"]
    netns = rig.hosts["rig3"].netns
    sh(["ip", "-n", netns, "link", "set", iface, "down"])
    try:
        rows = {row["name"]: row for row in rig.lanes(*args, "--json").json()["hosts"]}
        assert rows["rig3"]["blocks"] == [{"lane": "quad", "reason": f"{iface} is down, not up"}]
        assert all(rows[h]["blocks"] == [] for h in rows if h != "rig3")
        plan = rig.plan()
        lanes = {lp["name"]: lp for lp in plan.json()["lanes"]}
        quad = lanes["quad"]
        assert (quad["action"], quad["cause"], quad["steps"]) == ("blocked", "host-facts", []), plan.describe()
        assert quad["reason"] == f"rig3: {iface} is down, not up; nothing was stopped"
        assert lanes["solo"]["action"] == "deploy"  # one host: no data plane needed
    finally:
        sh(["ip", "-n", netns, "link", "set", iface, "up"])
    assert {lp["name"]: lp["action"] for lp in rig.plan().json()["lanes"]} == {"quad": "deploy", "solo": "deploy"}


def test_the_probe_program_is_installed_under_its_hash_and_sent_again_when_altered(rig: Rig) -> None:
    """Real sshd, real python3: the first probe installs the program (the rig's hosts share this machine's
    filesystem, so one copy serves them all); an altered copy is refused by the launcher and replaced in
    the same run, and every host still answers."""
    args = ["hosts", "--repo", str(rig.clone), "--known-hosts", str(rig.known_hosts), "--ssh-key", str(rig.client_key)]
    copy = Path(program_path(str(rig.state_on_host)))
    copy.unlink(missing_ok=True)
    run = rig.lanes(*args, "--json")
    assert run.returncode == 0, run.describe()
    assert all(row["reachable"] for row in run.json()["hosts"])
    assert copy.read_text() == PROBE_SCRIPT
    assert oct(copy.stat().st_mode & 0o777) == "0o600"
    copy.write_text(PROBE_SCRIPT + "\nraise SystemExit('an altered copy ran')\n")
    again = rig.lanes(*args, "--json")
    assert again.returncode == 0, again.describe()
    assert all(row["reachable"] for row in again.json()["hosts"]), again.describe()
    assert copy.read_text() == PROBE_SCRIPT
