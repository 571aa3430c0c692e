"""Property: any text in a lane field reaches `docker run` unchanged, as one argv item, shell-safe."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engines import render_lane
from reconciler.facts.docker import run_argv
from reconciler.spec import FleetDefaults, Host, Lane, ModelSpec
from tests.support.properties import examples

from .conftest import COMMIT, IMAGE, LaneFactory

pytestmark = pytest.mark.timeout(30)

NASTY = ["; rm -rf /", "$(id)", "`id`", "'", '"', "\n", "a b", "\\", "*", "--privileged", "-e", "ü∂ 中文", ""]
# No NUL: no command line can carry it (the renderer refuses it, tested elsewhere).
text = st.one_of(st.sampled_from(NASTY), st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24))
nonempty = text.filter(bool)
# `docker run -v` splits on ':', so mount paths never hold one (the renderer refuses it, tested elsewhere).
# Paths are absolute without '.'/'..' segments (the spec refuses those, tested in tests/spec).
path_part = st.text(st.characters(codec="utf-8", exclude_characters="\x00:"), min_size=1, max_size=16).filter(
    lambda s: not {".", ".."} & set(s.split("/"))
)
env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True).filter(lambda n: n != "HF_TOKEN")
engines = st.sampled_from(
    [("sglang", "native"), ("vllm", "ray"), ("vllm", "native"), ("flare", "native"), ("generic", "native")]
)


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    engine=engines,
    args=st.lists(text, max_size=5),
    env=st.dictionaries(env_name, text, max_size=4),
    served=nonempty,
    mount_source=path_part,
    mount_target=path_part,
    ranks=st.integers(min_value=1, max_value=4),
)
def test_fields_reach_argv_verbatim(
    make_lane: LaneFactory,
    model: ModelSpec,
    fleet: FleetDefaults,
    hosts: Mapping[str, Host],
    engine: tuple[str, str],
    args: list[str],
    env: dict[str, str],
    served: str,
    mount_source: str,
    mount_target: str,
    ranks: int,
) -> None:
    target = "/mnt/" + mount_target
    lane: Lane = make_lane(
        engine=engine[0],
        launcher=engine[1],
        hosts=[f"dgx{i}" for i in range(1, ranks + 1)],
        tp=ranks,
        args=args,
        env=env,
        served_model_name=served,
        image=IMAGE,
        mounts=[{"source": "/" + mount_source, "target": target}],
    )
    for spec in render_lane(lane, model, fleet, hosts, COMMIT):
        argv = run_argv(spec)
        assert all(isinstance(item, str) for item in argv)
        assert shlex.split(shlex.join(argv)) == argv
        image_at = argv.index(IMAGE)
        command = argv[image_at + 1 :]
        ray_worker = engine == ("vllm", "ray") and spec.label("lanes.rank") != "0"
        if not ray_worker:
            # The lane's args close every command, each its own item.
            assert command[len(command) - len(args) :] == args
            if engine[0] != "generic":
                assert command[command.index("--served-model-name") + 1] == served
        options = argv[:image_at]
        for key, value in env.items():
            assert f"{key}={value}" in options
        assert f"/{mount_source}:{target}" in options
