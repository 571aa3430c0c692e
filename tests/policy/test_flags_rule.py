"""`engine-flags`: a rank's command line that its engine release would refuse denies its lane, by file and field."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reconciler.engines import ContainerSpec, RankContext, flagtable, registry
from reconciler.policy import evaluate
from reconciler.policy.verdict import Verdict, Violation
from reconciler.spec.load import DesiredState
from tests.policy.builders import with_rule
from tests.support.example import EUGR, GLM, MINIMAX, PRODUCTION, example_policies, example_state, with_lane

pytestmark = pytest.mark.timeout(60)


def _flags(verdict: Verdict, lane: str | None = None) -> list[Violation]:
    """The rule's findings (of one lane): the example's FLARE lane always has its no-table warning."""
    return [v for v in verdict.violations if v.rule == "engine-flags" and (lane is None or v.lane == lane)]


def _with_args(lane: str, *extra: str, **changes: Any) -> DesiredState:
    state = example_state()
    return with_lane(state, lane, args=[*state.lanes[lane].args, *extra], **changes)


def test_the_example_fleet_passes_and_only_flare_is_unchecked() -> None:
    verdict = evaluate(example_state(), example_policies())
    (only,) = _flags(verdict)
    assert (only.lane, only.severity, only.detail["field"]) == (MINIMAX, "warn", "engine_version")
    assert "no flag table for flare 0.0.0+g4e2a91c" in only.message
    assert "flare publishes no Python package with its argument parser" in only.message


def test_a_misspelled_flag_in_args_denies_the_lane_naming_file_field_and_argparses_words() -> None:
    # The lane runs the release itself: its table is the parser the build runs, so a refusal denies.
    verdict = evaluate(_with_args(EUGR, "--kv-cache-dtpye", "fp8", engine_version="0.32.0"), example_policies())
    (found,) = _flags(verdict, EUGR)
    assert (found.lane, found.severity, found.rank, found.host) == (EUGR, "deny", 0, "dgx5")
    assert found.message == (
        "state/lanes/eugr-nightly-dsv41-3x.yaml: args: vllm 0.32.0 would refuse rank 0's command line: "
        "vllm: error: unrecognized arguments: --kv-cache-dtpye fp8"
    )
    assert found.detail["file"] == "state/lanes/eugr-nightly-dsv41-3x.yaml"
    assert (found.detail["field"], found.detail["flag"], found.detail["table"]) == (
        "args",
        "--kv-cache-dtpye",
        "vllm-0.32.0",
    )
    assert verdict.denied_lanes == {EUGR}


def test_a_choice_the_release_lacks_is_denied_with_its_choices() -> None:
    verdict = evaluate(
        _with_args(PRODUCTION, "--tool-call-parser", "deepseekv41", engine_version="0.5.19"), example_policies()
    )
    (found,) = _flags(verdict, PRODUCTION)
    assert found.severity == "deny" and found.detail["field"] == "args"
    assert "sglang 0.5.19 would refuse rank 0's command line: sglang serve: error: argument --tool-call-parser: " in (
        found.message
    )
    assert "invalid choice: 'deepseekv41' (choose from 'auto', 'apertus2509'," in found.message


# The arguments of the production lane's public launcher (aidendle94/sparkrun-recipes,
# recipes/deepseek-v4.1-flash/sglang/launch/launch-sgl-dsv41.sh @ 08d7b30), which its SGLang branch
# build takes and 0.5.19, the release that build stands for, lacks (releases have them from 0.5.21).
LAUNCHER_ARGS = (
    "--reasoning-parser",
    "deepseek-v41",
    "--tool-call-parser",
    "deepseekv41",
    "--enable-decoder-swa-bounded-replay",
)


def test_a_build_judged_by_a_releases_table_is_warned_naming_that_release() -> None:
    verdict = evaluate(_with_args(PRODUCTION, *LAUNCHER_ARGS), example_policies())
    (found,) = _flags(verdict, PRODUCTION)
    assert found.severity == "warn" and found.detail["how"] == "chosen"
    assert verdict.denied_lanes == set()
    assert found.message.startswith(
        "state/lanes/dsv41-flash-1017-4x-sglang.yaml: args: sglang 0.5.19 would refuse rank 0's command line "
        "(the table of release 0.5.19, which stands in for this build; the build may take flags that release "
        "lacks): sglang serve: error: argument --reasoning-parser: invalid choice: 'deepseek-v41'"
    )
    # The same for the vLLM main build and the r39 fork, judged by 0.32.0's and 0.26.0's tables.
    for lane, release in ((EUGR, "0.32.0"), (GLM, "0.26.0")):
        (other,) = _flags(evaluate(_with_args(lane, "--no-such-flag"), example_policies()), lane)
        assert (other.severity, other.detail["how"], other.detail["table"]) == ("warn", "chosen", f"vllm-{release}")
        assert other.detail.get("would_deny") is not True


def test_a_flag_sglang_0523_removed_is_refused_there_as_ambiguous_with_argparses_words() -> None:
    # 0.5.19 had --cuda-graph-max-bs beside --cuda-graph-max-bs-decode and -prefill; 0.5.23 kept only the
    # two (sglang-0.5.23.json, from its arg_groups/fields/exec_.py). SGLang's parser takes abbreviations,
    # so the old flag is now a prefix of two and refused. Without 0.5.23's table the nearest (0.5.19)
    # judged, which has the flag: it passed silently.
    verdict = evaluate(_with_args(PRODUCTION, "--cuda-graph-max-bs", "16", engine_version="0.5.23"), example_policies())
    (found,) = _flags(verdict, PRODUCTION)
    assert (found.severity, found.detail["how"], found.detail["table"]) == ("deny", "release", "sglang-0.5.23")
    assert found.message == (
        "state/lanes/dsv41-flash-1017-4x-sglang.yaml: args: sglang 0.5.23 would refuse rank 0's command line: "
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill"
    )
    assert verdict.denied_lanes == {PRODUCTION}
    assert _flags(
        evaluate(_with_args(PRODUCTION, "--cuda-graph-max-bs", "16", engine_version="0.5.19"), example_policies())
    ) == (_flags(evaluate(example_state(), example_policies())))


def test_the_launchers_parser_names_pass_on_the_releases_that_have_them() -> None:
    # --reasoning-parser deepseek-v41 and --tool-call-parser deepseekv41 are in 0.5.22's and 0.5.23's
    # wheels (sglang/srt/parser/reasoning_parser_names.py REASONING_PARSER_NAMES,
    # sglang/srt/function_call/parser_names.py TOOL_CALL_PARSER_NAMES), and both judge as exact.
    for release in ("0.5.22", "0.5.23"):
        verdict = evaluate(_with_args(PRODUCTION, *LAUNCHER_ARGS, engine_version=release), example_policies())
        assert _flags(verdict, PRODUCTION) == [], release
        match = flagtable.table_for("sglang", release)
        assert match is not None and (match.table.version, match.how, match.exact) == (release, "release", True)


def test_a_table_read_from_the_builds_own_source_denies(monkeypatch: pytest.MonkeyPatch) -> None:
    # What `scripts/flag_tables.py --wheel 0.0.0.dev1+gda64c5cbb=PATH` writes: that build's own parser
    # (here with the release's flags, so the launcher's parser names are unknown to it too).
    build = example_state().lanes[PRODUCTION].engine_version
    release = next(t for t in flagtable.tables() if t.engine == "sglang")
    own = replace(release, version=build, builds=(build,), read_from="build")
    shipped = flagtable.tables()
    monkeypatch.setattr(flagtable, "tables", lambda: (*shipped, own))
    verdict = evaluate(_with_args(PRODUCTION, *LAUNCHER_ARGS), example_policies())
    (found,) = _flags(verdict, PRODUCTION)
    assert (found.severity, found.detail["how"]) == ("deny", "build")
    assert found.message.startswith(
        f"state/lanes/dsv41-flash-1017-4x-sglang.yaml: args: sglang {build} would refuse rank 0's command line: "
        "sglang serve: error: argument --reasoning-parser: invalid choice: 'deepseek-v41'"
    )
    assert verdict.denied_lanes == {PRODUCTION}


def test_a_prefix_of_a_real_flag_is_what_the_engine_reads_it_as() -> None:
    # SGLang's parser allows abbreviations: `--kv-cache-dtyp` is --kv-cache-dtype to it, so no finding;
    # vLLM has --kv-cache-dtype-skip-layers too, so the same prefix is ambiguous there and refused.
    assert _flags(evaluate(_with_args(PRODUCTION, "--kv-cache-dtyp", "fp8_e4m3"), example_policies()), PRODUCTION) == []
    (found,) = _flags(evaluate(_with_args(EUGR, "--kv-cache-dtyp", "fp8"), example_policies()), EUGR)
    assert found.message.endswith(
        "ambiguous option: --kv-cache-dtyp could match --kv-cache-dtype, --kv-cache-dtype-skip-layers"
    )


def test_a_fault_in_what_lanes_rendered_names_the_field_it_came_from() -> None:
    # A served name that starts with '-' reads as an option to argparse: the engine would refuse it.
    verdict = evaluate(with_lane(example_state(), EUGR, served_model_name="-fast"), example_policies())
    (found,) = _flags(verdict, EUGR)
    assert found.detail["field"] == "served_model_name"
    assert found.message.endswith("argument --served-model-name: expected at least one argument")


def test_a_stopped_lane_is_warned_and_ray_workers_are_not_judged() -> None:
    verdict = evaluate(_with_args(GLM, "--no-such-flag", engine_version="0.26.0"), example_policies())
    (found,) = _flags(verdict, GLM)
    assert (found.lane, found.severity, found.rank) == (GLM, "warn", 0)  # only the Ray head runs `vllm serve`
    assert found.message.startswith("lane is stopped, would be denied when started: state/lanes/glm53")
    assert found.detail["would_deny"] is True


def test_without_a_table_of_its_own_a_refusal_is_a_warning() -> None:
    # 0.32.3 has no table: the nearest release of its series (0.32.0) judges, and only warns.
    verdict = evaluate(_with_args(EUGR, "--no-such-flag", engine_version="0.32.3"), example_policies())
    (found,) = _flags(verdict, EUGR)
    assert found.severity == "warn"
    assert "(the table of the nearest release 0.32.0; it may lack flags)" in found.message
    # A release of another series has none at all: the lane is warned that nothing was checked.
    (unchecked,) = _flags(
        evaluate(_with_args(EUGR, "--no-such-flag", engine_version="0.40.0"), example_policies()), EUGR
    )
    assert (unchecked.severity, unchecked.detail["field"]) == ("warn", "engine_version")


def test_switched_off_it_says_nothing() -> None:
    policies = with_rule(example_policies(), "engine-flags", enabled=False)
    assert _flags(evaluate(_with_args(EUGR, "--no-such-flag"), policies)) == []  # the FLARE warning too


def test_the_rule_reads_the_render_rules_specs_and_renders_nothing_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = registry.render_rank

    def counting(ctx: RankContext) -> ContainerSpec:
        calls.append(ctx.lane.name)
        return real(ctx)

    monkeypatch.setattr(registry, "render_rank", counting)
    state = _with_args(EUGR, "--no-such-flag", engine_version="0.32.0")
    verdict = evaluate(state, example_policies())
    assert [v.severity for v in _flags(verdict, EUGR)] == ["deny"]
    assert len(calls) == sum(lane.ranks for lane in state.lanes.values())  # each rank once, by `render`
