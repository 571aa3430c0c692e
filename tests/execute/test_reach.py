"""Where a cycle's commands go is built once per loaded commit and settings and shared by every operation
(issue 27: each operation's executor built the whole fleet's targets again, 25 MB at a 1,000-host
convergence); another commit or another setting of the hosts' addresses builds them again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reconciler.execute.cycle import CycleRunner, CycleSettings, HostOverride, targets_for
from reconciler.execute.secrets import SecretStore
from reconciler.store.journal import Store
from reconciler.transport.local import LocalTransport
from tests.support.example import example_state


def runner(tmp_path: Path, settings: CycleSettings) -> CycleRunner:
    (tmp_path / "secrets").mkdir(exist_ok=True)
    return CycleRunner(LocalTransport(), Store(tmp_path / "s.db"), SecretStore(tmp_path / "secrets"), settings)


def test_the_same_commit_and_settings_share_one_set_of_targets(tmp_path: Path) -> None:
    desired = example_state()
    cycles = runner(tmp_path, CycleSettings(overrides={"dgx1": HostOverride("127.0.0.9", 2222, "lanes")}))
    hosts, reach = cycles.reach(desired)
    assert hosts == targets_for(desired, cycles.settings.overrides)
    assert (hosts["dgx1"].address, hosts["dgx1"].port, hosts["dgx1"].user) == ("127.0.0.9", 2222, "lanes")
    assert set(hosts) <= set(reach) and set(reach) - set(hosts) == {o.name for o in desired.fleet.origins}
    again = cycles.reach(desired)
    assert again[0] is hosts and again[1] is reach


def test_another_commit_or_other_addresses_build_them_again(tmp_path: Path) -> None:
    desired = example_state()
    cycles = runner(tmp_path, CycleSettings())
    hosts, _ = cycles.reach(desired)
    moved = dataclasses.replace(
        desired, hosts={**desired.hosts, "dgx1": desired.hosts["dgx1"].model_copy(update={"address": "10.0.0.77"})}
    )
    assert cycles.reach(moved)[0]["dgx1"].address == "10.0.0.77"
    assert hosts["dgx1"].address != "10.0.0.77"
    cycles.settings = CycleSettings(overrides={"dgx1": HostOverride("127.0.0.5", 22)})  # a reloaded config
    assert cycles.reach(moved)[0]["dgx1"].address == "127.0.0.5"
