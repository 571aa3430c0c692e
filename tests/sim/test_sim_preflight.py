"""The simulated docker's answer to lanes' preflight run: the image's own parser, as strict as docker's run."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.facts.preflight import preflight_argv, read_result
from reconciler.sim.registry import SimRegistry
from reconciler.sim.runtime import SimContainerRuntime

pytestmark = pytest.mark.timeout(30)


def _runtime(tmp_path: Path) -> tuple[SimContainerRuntime, SimRegistry]:
    registry = SimRegistry()
    return SimContainerRuntime("a", "127.0.0.1", registry, tmp_path), registry


async def test_the_images_parser_refuses_with_the_engines_words_and_takes_what_it_takes(tmp_path: Path) -> None:
    runtime, registry = _runtime(tmp_path)
    # A build lanes has no table for, whose image carries vLLM 0.33.0's parser.
    image = registry.add("lab/vllm:main", env={"STANDIN_VERSION": "0.40.0.dev0+gabc", "STANDIN_PARSER": "vllm-0.33.0"})
    status, _, err = await runtime.execute(preflight_argv("vllm", image.pinned, "p1", ["/m", "--enable-prefix-cachng"]))
    assert status == 2
    assert err.startswith(f"Unable to find image '{image.pinned}' locally\nusage: vllm")  # pulled, as docker run does
    assert read_result(status, err).message == "vllm: error: unrecognized arguments: --enable-prefix-cachng"
    good = ["/m", "--enable-prefix-caching"]
    status, _, err = await runtime.execute(preflight_argv("vllm", image.pinned, "p2", good))
    assert (status, err) == (0, "")
    assert runtime.daemon.containers == {}  # --rm: nothing left behind


async def test_an_image_without_a_parser_of_its_own_or_a_table_judges_nothing(tmp_path: Path) -> None:
    runtime, registry = _runtime(tmp_path)
    image = registry.add("lab/vllm:odd", env={"STANDIN_VERSION": "0.40.0.dev0+gabc"})
    status, _, _ = await runtime.execute(preflight_argv("vllm", image.pinned, "p1", ["/m", "--enable-prefix-cachng"]))
    assert status == 0  # no table placed for this build: the stand-in has no parser to run


async def test_an_image_without_python3_fails_as_docker_exec_does(tmp_path: Path) -> None:
    runtime, registry = _runtime(tmp_path)
    image = registry.add("lab/vllm:slim", env={"STANDIN_VERSION": "0.33.0"}, lacks=frozenset({"python3"}))
    status, _, err = await runtime.execute(preflight_argv("vllm", image.pinned, "p1", ["/m"]))
    assert status == 127 and '"python3": executable file not found in $PATH' in err
    assert read_result(status, err).outcome == "unjudged"
