"""Rendered command lines against the engines' own flag tables: what lanes renders, the engine takes.

Every example lane, and lanes drawn by hypothesis over the pinned builds (topology, KV dtype, limits,
served names, and lane `args` drawn from the release's own flags with values it accepts), renders to
ranks whose engine arguments the release's parser accepts. A flag the release does not have, or a
value outside a flag's choices, added to a lane's args, is refused with argparse's sentence.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reconciler.engines import ContainerSpec, render_lane
from reconciler.engines.flags import Flag, FlagTable, check_argv, engine_argv, table_for
from reconciler.errors import InputError
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec
from tests.support.example import example_state
from tests.support.properties import examples

from .conftest import IMAGE, LaneFactory

pytestmark = pytest.mark.timeout(60)

# The releases whose tables the example builds are judged by. The builds themselves (a SGLang branch,
# vLLM main, a fork) are judged by these tables only as stand-ins, whose refusals warn; a release is
# its own table, so what it refuses the renderer must never produce.
BUILDS = {
    ("sglang", "native"): "0.5.19",
    ("vllm", "native"): "0.32.0",
    ("vllm", "ray"): "0.26.0",
}
KV = [
    "auto", "bf16", "bfloat16", "fp16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "fp8_ds_mla", "nvfp4_ds_mla",
]  # fmt: skip
# Flags the lane's own fields already render (a second --port would still parse; it is just noise).
RENDERED = {"--model-path", "--model", "--port", "--host", "--served-model-name", "--kv-cache-dtype"}


def _render(
    lane: Lane, model: ModelSpec, fleet: FleetDefaults, hosts: Mapping[str, Host]
) -> list[ContainerSpec] | InputError:
    """The lane's specs, or the renderer's refusal."""
    try:
        return render_lane(lane, model, fleet, hosts, "c0ffee")
    except InputError as refused:
        return refused


def _engine_argvs(engine: str, specs: list[ContainerSpec]) -> list[list[str]]:
    out = []
    for spec in specs:
        found = engine_argv(engine, [spec.entrypoint or "", *spec.command])
        if found is not None:
            out.append(found[1])
    return out


def test_every_example_lane_renders_what_its_engine_release_accepts() -> None:
    state = example_state()
    checked = 0
    for name, lane in state.lanes.items():
        match = table_for(lane.engine, lane.engine_version)
        if lane.engine not in ("sglang", "vllm"):
            assert match is None, name  # FLARE publishes no parser; generic is the team's own command
            continue
        # Every example build has a table written for it (a release's, standing in: its refusals warn).
        assert match is not None and match.placed, name
        specs = render_lane(lane, state.models[lane.model], state.fleet, state.hosts, state.commit)
        for argv in _engine_argvs(lane.engine, specs):
            assert check_argv(match.table, argv) is None, (name, argv)
            checked += 1
    # Production (4 SGLang ranks) + eugr (3 vLLM ranks) + the glm53 Ray head (its workers run `ray start`).
    assert checked == 8


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("kv", KV)
def test_every_kv_dtype_renders_as_the_release_spells_it_or_is_refused_with_its_choices(
    make_lane: LaneFactory,
    model: ModelSpec,
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    build: tuple[str, str],
    kv: str,
) -> None:
    engine, launcher = build
    lane = make_lane(engine=engine, launcher=launcher, engine_version=BUILDS[build], kv_cache_dtype=kv, ep=1, args=[])
    match = table_for(engine, lane.engine_version)
    assert match is not None
    specs = _render(lane, model, fleet, hosts)
    if isinstance(specs, InputError):
        assert specs.field == "kv_cache_dtype"
        choices = match.table.choices("--kv-cache-dtype")
        assert choices is not None
        assert all(str(c) in specs.message for c in choices)
        return
    for argv in _engine_argvs(engine, specs):
        assert check_argv(match.table, argv) is None, argv


def _usable(flag: Flag) -> bool:
    if flag.refused or flag.required or set(flag.flags) & RENDERED:
        return False
    if flag.nargs == 0:
        return True
    return flag.nargs is None and (flag.choices is not None or flag.type in ("int", "float", "str"))


@st.composite
def lane_args(draw: st.DrawFn, table: FlagTable) -> list[str]:
    """A few of the release's own flags, each with a value it accepts."""
    usable = [f for f in table.flags if _usable(f)]
    args: list[str] = []
    for flag in draw(st.lists(st.sampled_from(usable), max_size=4, unique_by=lambda f: f.flags[0])):
        args.append(draw(st.sampled_from(flag.flags)))
        if flag.nargs == 0:
            continue
        if flag.choices is not None and table.choices(flag.flags[0]) is not None:
            # vLLM 0.26 lists the string 'None' among an optional flag's choices, yet its converter turns
            # 'None' into None, which is not among them: that release refuses `--flag None` itself.
            real = [c for c in flag.choices if c is not None and not (c == "None" and flag.type.startswith("optional"))]
            args.append(str(draw(st.sampled_from(real))))
        elif flag.type == "int":
            args.append(str(draw(st.integers(0, 1 << 20))))
        elif flag.type == "float":
            args.append(str(draw(st.floats(0, 1, allow_nan=False))))
        else:
            args.append(draw(st.text("abcdefghijklmnopqrstuvwxyz0123456789_./:", min_size=1, max_size=12)))
    return args


@st.composite
def drawn_lanes(draw: st.DrawFn) -> dict[str, object]:
    engine, launcher = draw(st.sampled_from(sorted(BUILDS)))
    version = BUILDS[(engine, launcher)]
    match = table_for(engine, version)
    assert match is not None
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([1, 2] if tp < 4 else [1]))
    return {
        "engine": engine,
        "launcher": launcher,
        "engine_version": version,
        "hosts": [f"dgx{i}" for i in range(1, tp * pp + 1)],
        "tp": tp,
        "pp": pp,
        "ep": draw(st.sampled_from([d for d in (1, 2, 4) if tp % d == 0])),
        "dcp": draw(st.sampled_from([d for d in (1, 2, 4) if tp % d == 0])),
        "kv_cache_dtype": draw(st.sampled_from(KV)),
        "max_model_len": draw(st.integers(1, 1 << 20)),
        "max_num_seqs": draw(st.integers(1, 512)),
        "gpu_memory_utilization": draw(st.floats(0.05, 1.0)),
        "port": draw(st.integers(1024, 65535)),
        # A name that starts with '-' reads as an option to argparse: the engine refuses it (the policy
        # test shows it denied on served_model_name), so the renderers' own output is drawn without one.
        "served_model_name": draw(st.text(min_size=1, max_size=16).filter(lambda s: "\x00" not in s and s[0] != "-")),
        "image": IMAGE,
        "args": draw(lane_args(match.table)),
        "env": {},
        "secrets": [],
    }


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=drawn_lanes(), typo=st.text("qxz", min_size=2, max_size=6))
def test_drawn_lanes_render_what_the_engine_takes_and_a_bad_flag_is_refused(
    make_lane: LaneFactory,
    model: ModelSpec,
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    fields: dict[str, object],
    typo: str,
) -> None:
    lane = make_lane(**fields)
    match = table_for(lane.engine, lane.engine_version)
    assert match is not None
    specs = _render(lane, model, fleet, hosts)
    if isinstance(specs, InputError):
        if specs.field == "kv_cache_dtype":
            # The release has no spelling for that dtype: the refusal lists what it takes.
            assert "takes" in specs.message
        assume(False)  # an ep or dcp the engine cannot honour is the renderer's own refusal, tested elsewhere
        return
    argvs = _engine_argvs(lane.engine, specs)
    assert argvs, "no rank runs the engine's parser"
    for argv in argvs:
        assert check_argv(match.table, argv) is None, argv
    # A flag the release does not have ('--qxz...' is no prefix of any of its flags) is refused, by name.
    bad = make_lane(**{**fields, "args": [*lane.args, f"--{typo}-flag"]})
    argv = _engine_argvs(lane.engine, render_lane(bad, model, fleet, hosts, "c0ffee"))[0]
    error = check_argv(match.table, argv)
    assert error is not None
    assert error.message == f"unrecognized arguments: --{typo}-flag"
    # So is a value outside a flag's choices.
    wrong = make_lane(**{**fields, "args": [*lane.args, "--kv-cache-dtype", f"{typo}-dtype"]})
    argv = _engine_argvs(lane.engine, render_lane(wrong, model, fleet, hosts, "c0ffee"))[0]
    error = check_argv(match.table, argv)
    assert error is not None
    assert error.message.startswith(f"argument --kv-cache-dtype: invalid choice: '{typo}-dtype' (choose from 'auto'")
