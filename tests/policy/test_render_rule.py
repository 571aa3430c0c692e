"""The `render` rule: a lane that cannot be rendered to containers is denied, alone, with file and field.

Before it, `lanes check` never rendered, so such a lane passed check and then broke every cycle of
the daemon (the planner's InputError escaped, and no other lane converged).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from reconciler.plan import PlanOptions, plan_fleet
from reconciler.policy import evaluate
from reconciler.spec.lane import Mount
from tests.support.example import EUGR, PRODUCTION, example_policies, example_state, repo_files, with_lane
from tests.support.gitrepo import make_repo

pytestmark = pytest.mark.timeout(60)

# The fleet mounts its HF cache at this target already: a second mount onto it cannot be expressed.
ONTO_THE_CACHE = Mount(source="/srv/other-cache", target="/root/.cache/huggingface")


def test_a_mount_onto_the_cache_target_denies_that_lane_only() -> None:
    desired = with_lane(example_state(), EUGR, mounts=(ONTO_THE_CACHE,))
    verdict = evaluate(desired, example_policies())
    render = [v for v in verdict.violations if v.rule == "render"]
    assert [(v.lane, v.severity) for v in render] == [(EUGR, "deny")]
    assert "state/lanes/eugr-nightly-dsv41-3x.yaml: mounts[0]:" in render[0].message
    assert render[0].detail == {"file": f"state/lanes/{EUGR}.yaml", "field": "mounts[0]"}
    assert verdict.denied_lanes == {EUGR}
    assert EUGR not in verdict.rendered and PRODUCTION in verdict.rendered


def test_a_secret_that_is_also_a_plain_env_variable_is_denied() -> None:
    prod = example_state().lanes[PRODUCTION]
    clash = prod.secrets[0].env
    desired = with_lane(example_state(), PRODUCTION, env={**prod.env, clash: "plain"})
    verdict = evaluate(desired, example_policies())
    render = [v for v in verdict.violations if v.rule == "render"]
    assert [(v.lane, v.detail["field"]) for v in render] == [(PRODUCTION, "secrets")]
    assert "both a secret and a plain environment variable" in render[0].message


def test_a_renderer_bug_is_a_deny_of_that_lane_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from reconciler.policy.rules import render as render_rule

    real = render_rule.render_lane  # type: ignore[attr-defined]

    def broken(lane, *args, **kwargs):  # type: ignore[no-untyped-def]
        if lane.name == EUGR:
            raise KeyError("a bug")
        return real(lane, *args, **kwargs)

    monkeypatch.setattr(render_rule, "render_lane", broken)
    verdict = evaluate(example_state(), example_policies())
    assert verdict.denied_lanes == {EUGR}
    assert "lanes could not render this lane (KeyError" in next(v.message for v in verdict.violations if v.lane == EUGR)


def test_a_stopped_lane_that_cannot_render_is_a_warning() -> None:
    desired = with_lane(example_state(), EUGR, mounts=(ONTO_THE_CACHE,), desired="stopped")
    verdict = evaluate(desired, example_policies())
    assert [(v.lane, v.severity) for v in verdict.violations if v.rule == "render"] == [(EUGR, "warn")]
    assert verdict.ok


def test_the_planner_denies_it_and_plans_the_others() -> None:
    desired = with_lane(example_state(), EUGR, mounts=(ONTO_THE_CACHE,))
    from tests.support.planfleet import empty_fleet, probed

    verdict = evaluate(desired, example_policies(), host_info=probed(desired))  # as a cycle renders
    result = plan_fleet(desired, empty_fleet(desired), verdict, PlanOptions())
    actions = {lp.lane: lp.action for lp in result.lanes}
    assert actions[EUGR] == "denied" and actions[PRODUCTION] == "deploy"


def test_lanes_check_denies_it_naming_file_and_field(tmp_path: Path) -> None:
    files = repo_files()
    path = f"state/lanes/{EUGR}.yaml"
    files[path] += b"mounts:\n  - {source: /srv/other-cache, target: /root/.cache/huggingface}\n"
    make_repo(tmp_path, files)
    result = CliRunner().invoke(app, ["check", "--repo", str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    verdict = json.loads(result.output)
    render = [v for v in verdict["violations"] if v["rule"] == "render"]
    assert [(v["lane"], v["severity"], v["detail"]["field"]) for v in render] == [(EUGR, "deny", "mounts[0]")]
    assert path in render[0]["message"]
