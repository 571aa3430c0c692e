"""model-disk: a rank host's disk must take the model's missing files plus a margin; model-weights: weight_bytes
agrees with the manifest's shards. Every expected figure is worked out by hand here."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.errors import InputError
from reconciler.policy import Violation, evaluate
from reconciler.policy.diskfacts import ModelDisk
from reconciler.spec.load import DesiredState, PolicySet
from reconciler.spec.manifest import Manifest, ManifestFile

from .builders import GIB, host, lane, model, only_rules, repo_policies, state, with_rule

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(repo_policies(), "model-disk", "model-weights")
HOSTS = ("h0", "h1", "h2", "h3")
PATH = "/models/m"
SHARD1, SHARD2, CONFIG = 40 * GIB, 30 * GIB, 1000
TOTAL = SHARD1 + SHARD2 + CONFIG  # 70 GiB + 1000 bytes
WEIGHTS = SHARD1 + SHARD2 - 4096  # the tensors: the shards less their headers


def manifest(*sizes: tuple[str, int], name: str = "m") -> Manifest:
    files = tuple(ManifestFile(path=p, size=s, sha256="0" * 64) for p, s in sorted(sizes))
    return Manifest(model=name, revision=None, index=None, files=files, total_bytes=sum(s for _, s in sizes))


MANIFEST = manifest(
    ("config.json", CONFIG), ("model-00001-of-00002.safetensors", SHARD1), ("model-00002-of-00002.safetensors", SHARD2)
)


def desired(*, weight_bytes: int = WEIGHTS, running: bool = True, with_manifest: bool = True) -> DesiredState:
    out = state(
        [host(h) for h in HOSTS],
        [model("m", weight_bytes=weight_bytes)],
        [lane("l", "m", HOSTS, desired="running" if running else "stopped")],
    )
    return dataclasses.replace(out, manifests={"m": MANIFEST} if with_manifest else {})


def disk(h: str, free: int, present: int | None, measured_at: str = PATH) -> ModelDisk:
    return ModelDisk(host=h, path=PATH, free=free, measured_at=measured_at, present=present)


def found(
    state_: DesiredState, disks: list[ModelDisk] | None, policies: PolicySet = POLICIES, rule: str = "model-disk"
) -> list[Violation]:
    model_disks = {(d.host, d.path): d for d in disks} if disks is not None else None
    return [v for v in evaluate(state_, policies, model_disks=model_disks).violations if v.rule == rule]


def test_a_host_that_cannot_take_the_model_is_denied_with_the_figures() -> None:
    # Margin: max(10 GiB floor, 0 % of the model, the 40 GiB largest shard) = 40 GiB.
    # h0: nothing there, 100 GiB free: needs 70 GiB + 1000 B + 40 GiB = 110 GiB + 1000 B: denied.
    # h1: 70 GiB there already, 41 GiB free: needs 1000 B + 40 GiB: fits.
    # h2: whole already, 1 GiB free: nothing to copy, nothing to check.
    # h3: the probe did not report the path: nothing said.
    disks = [disk("h0", 100 * GIB, 0), disk("h1", 41 * GIB, 70 * GIB), disk("h2", 1 * GIB, TOTAL)]
    [v] = found(desired(), disks)
    assert (v.severity, v.lane, v.host) == ("deny", "l", "h0")
    assert v.detail["need_bytes"] == 110 * GIB + 1000
    assert v.detail["margin_bytes"] == 40 * GIB
    assert v.detail["free_bytes"] == 100 * GIB
    assert v.detail["missing_bytes"] == TOTAL
    assert "h0: /models/m has 100.0 GiB free but model m needs 110.0 GiB" in v.message
    assert "70.0 GiB still to copy of 70.0 GiB (0.0 GiB already there) plus a 40.0 GiB margin" in v.message
    assert "free 10.0 GiB on h0" in v.message


def test_bytes_already_there_count_toward_the_need() -> None:
    # h1: 30 GiB of the 70 there, 79 GiB free: needs 40 GiB + 1000 B + 40 GiB margin = 80 GiB + 1000 B: denied;
    # with 81 GiB free it fits.
    [v] = found(desired(), [disk("h1", 79 * GIB, 30 * GIB)])
    assert v.detail["need_bytes"] == 80 * GIB + 1000 and v.detail["present_bytes"] == 30 * GIB
    assert found(desired(), [disk("h1", 81 * GIB, 30 * GIB)]) == []


def test_a_folder_holding_more_than_the_model_counts_as_the_model_only() -> None:
    # 200 GiB of other files under the path: present is capped at the model's total, nothing to copy.
    assert found(desired(), [disk("h0", 0, 200 * GIB)]) == []


def test_the_floor_and_the_share_of_the_margin() -> None:
    # margin_gib 50 beats the 40 GiB shard: h1 (1000 B missing) needs 50 GiB + 1000 B of its 45 GiB.
    policies = with_rule(POLICIES, "model-disk", params={"margin_gib": 50})
    [v] = found(desired(), [disk("h1", 45 * GIB, TOTAL - 1000)], policies)
    assert v.detail["margin_bytes"] == 50 * GIB and v.detail["need_bytes"] == 50 * GIB + 1000
    # margin_percent 100 beats both: 70 GiB + 1000 B of margin, so 70 GiB + 2000 B needed of 60 GiB.
    policies = with_rule(POLICIES, "model-disk", params={"margin_percent": 100})
    [v] = found(desired(), [disk("h1", 60 * GIB, TOTAL - 1000)], policies)
    assert v.detail["margin_bytes"] == TOTAL and v.detail["need_bytes"] == TOTAL + 1000


def test_where_the_disk_was_measured_is_said_when_the_path_is_not_there_yet() -> None:
    [v] = found(desired(), [disk("h0", 1 * GIB, 0, measured_at="/models")])
    assert "/models/m (measured at /models) has 1.0 GiB free" in v.message


def test_without_host_facts_or_a_manifest_the_rule_says_nothing() -> None:
    assert found(desired(), None) == []
    assert found(desired(with_manifest=False), [disk("h0", 0, 0)]) == []


def test_a_stopped_lane_is_only_warned_about() -> None:
    [v] = found(desired(running=False), [disk("h0", 0, 0)])
    assert v.severity == "warn" and v.detail["would_deny"] is True


@pytest.mark.parametrize(
    ("weight_bytes", "warned"),
    [
        (WEIGHTS, False),  # 4 KiB of headers below the shards
        (SHARD1 + SHARD2 + 1, True),  # more than the shards hold
        (int((SHARD1 + SHARD2) * 0.98), True),  # 2 % below: past the 1 % tolerance
        (int((SHARD1 + SHARD2) * 0.995), False),  # 0.5 % below: within it
    ],
)
def test_weight_bytes_against_the_shards(weight_bytes: int, warned: bool) -> None:
    found_ = found(desired(weight_bytes=weight_bytes), None, rule="model-weights")
    assert bool(found_) is warned
    if warned:
        [v] = found_
        assert v.severity == "warn" and v.detail["safetensors_bytes"] == SHARD1 + SHARD2
        assert f"weight_bytes {weight_bytes}" in v.message


@pytest.mark.parametrize(
    ("rule", "params", "field"),
    [
        ("model-disk", {"margin_gib": -1}, "rules.model-disk.params.margin_gib"),
        ("model-disk", {"margin_percent": 101}, "rules.model-disk.params.margin_percent"),
        ("model-disk", {"margin_gib": None}, "rules.model-disk.params.margin_gib"),
        ("model-weights", {"tolerance_percent": -0.5}, "rules.model-weights.params.tolerance_percent"),
    ],
)
def test_bad_settings_name_their_field(rule: str, params: dict[str, object], field: str) -> None:
    with pytest.raises(InputError) as caught:
        evaluate(desired(), with_rule(POLICIES, rule, params=params))
    assert caught.value.field == field
