"""mounts: a lane mounts only allowed host paths; the denied ones never, whatever `allow` says."""

from __future__ import annotations

import dataclasses

import pytest

from reconciler.errors import InputError
from reconciler.policy import Violation, evaluate
from reconciler.spec.fleet import FleetDefaults
from reconciler.spec.load import DesiredState, PolicySet
from reconciler.spec.policyfiles import RulesFile

from .builders import host, lane, model, only_rules, repo_policies, repo_state, state

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(repo_policies(), "mounts")


def with_mounts(*sources: str, desired: str = "running", fleet: FleetDefaults | None = None) -> DesiredState:
    mounts = [{"source": s, "target": f"/mnt/m{i}"} for i, s in enumerate(sources)]
    out = state([host("h0")], [model("m")], [lane("l", "m", ["h0"], mounts=mounts, desired=desired)])
    return dataclasses.replace(out, fleet=fleet) if fleet is not None else out


def found(desired: DesiredState, policies: PolicySet = POLICIES) -> list[Violation]:
    return [v for v in evaluate(desired, policies).violations if v.rule == "mounts"]


@pytest.mark.parametrize(
    "source",
    [
        "/",
        "//",
        "/etc",
        "/etc/ssl",
        "//etc/",
        "/root",
        "/root/.ssh",
        "/root/.ssh/authorized_keys",
        "/var/run/docker.sock",
        "/var/run",
        "/run/docker.sock",
        "/var/lib/lanes",
        "/var/lib/lanes/env",
        "/var",
        "/home/someone",
        "/models2",
        "/proc",
        "/dev",
    ],
)
def test_a_mount_outside_the_allow_list_or_on_a_denied_path_is_denied(source: str) -> None:
    [v] = found(with_mounts("/models/m", source))
    assert v.severity == "deny"
    assert "lanes/l: mounts[1]: host path " + source in v.message
    assert v.detail["field"] == "mounts[1]" and v.detail["file"] == "lanes/l"


@pytest.mark.parametrize(
    "source",
    ["/models", "/models/m", "/models/other/x", "/data/set", "/scratch", "/root/.cache/huggingface/hub"],
)
def test_allowed_paths_pass(source: str) -> None:
    assert found(with_mounts(source)) == []


def test_the_models_paths_and_the_hf_cache_are_allowed_wherever_they_are() -> None:
    fleet = FleetDefaults(hf_cache="/srv/hf")
    desired = with_mounts("/srv/hf/hub", "/srv/other", "/opt/w/m", fleet=fleet)
    moved = desired.models["m"].model_copy(update={"path": "/opt/w/m"})
    [v] = found(dataclasses.replace(desired, models={"m": moved}))
    assert "mounts[1]" in v.message and "/srv/other" in v.message


def test_the_state_dir_is_denied_even_when_allowed() -> None:
    fleet = FleetDefaults(state_dir_on_host="/data/lanes-state")
    [v] = found(with_mounts("/data/lanes-state/env", "/data/set", fleet=fleet))
    assert "mounts[0]" in v.message and "/data/lanes-state" in v.message


def test_a_denied_path_wins_over_allow() -> None:
    rules = POLICIES.rules.rules
    params = {**rules["mounts"].params, "allow": ["/"]}
    policies = dataclasses.replace(
        POLICIES, rules=RulesFile(rules={**rules, "mounts": rules["mounts"].model_copy(update={"params": params})})
    )
    assert found(with_mounts("/opt/anything"), policies) == []
    [v] = found(with_mounts("/etc"), policies)
    assert "mounts.deny" in v.message


def test_a_stopped_lane_is_warned_not_denied() -> None:
    [v] = found(with_mounts("/", desired="stopped"))
    assert v.severity == "warn" and v.detail.get("would_deny") is True


def test_the_example_state_mounts_nothing_denied() -> None:
    assert found(repo_state(), repo_policies()) == []


def test_rules_yaml_declares_the_rule_with_its_lists() -> None:
    rule = repo_policies().rules.rules["mounts"]
    assert rule.enabled and rule.severity == "deny"
    assert {"/", "/etc", "/root/.ssh", "/var/run/docker.sock"} <= set(rule.params["deny"])  # type: ignore[arg-type]
    assert {"/models", "/data", "/scratch"} <= set(rule.params["allow"])  # type: ignore[arg-type]


def test_a_relative_prefix_in_the_rules_file_is_an_input_error() -> None:
    rules = POLICIES.rules.rules
    params = {**rules["mounts"].params, "allow": ["models"]}
    policies = dataclasses.replace(
        POLICIES, rules=RulesFile(rules={**rules, "mounts": rules["mounts"].model_copy(update={"params": params})})
    )
    with pytest.raises(InputError, match="absolute"):
        evaluate(with_mounts("/models/m"), policies)
