"""An image without the launcher its lane runs is refused right after the pull, before any rank stops."""

from __future__ import annotations

import pytest

from tests.support.example import EUGR, EUGR_HOSTS
from tests.support.world import World

pytestmark = pytest.mark.timeout(120)


def ids(world: World) -> dict[str, str]:
    return {h: world.fleet.runtime(h).containers[f"lanes-{EUGR}-r{r}"].id for r, h in enumerate(EUGR_HOSTS)}


@pytest.mark.parametrize(
    ("launcher", "lacks", "says"),
    [
        ("native", frozenset({"vllm"}), "the image has no `vllm`"),
        ("ray", frozenset({"ray", "py:ray"}), "no `ray`, python module ray (NVIDIA's vLLM image needs Ray"),
    ],
)
async def test_an_image_without_its_launcher_fails_the_pull_step_and_nothing_stops(
    world: World, launcher: str, lacks: frozenset[str], says: str
) -> None:
    await world.cycle()
    before = ids(world)
    image = world.fleet.registry.add("eugr/spark-vllm-b12x:no-launcher", lacks=lacks).pinned
    world.commit("eugr: an image without its launcher", {EUGR: {"image": image, "launcher": launcher}})

    result = await world.cycle()

    eugr = next(r for r in result.results if r.lane == EUGR)
    assert eugr.result == "failed", eugr
    assert says in (eugr.error or ""), eugr.error
    assert all(f"dgx{n}:" in (eugr.error or "") for n in (5, 6, 7))
    assert ids(world) == before  # the old ranks still run: nothing was stopped
    record = world.store.lane(EUGR)
    assert record is not None and record.failed_fingerprint is not None  # permanent: not retried as is
    assert (record.health, record.retry_at) == ("degraded", None)  # the old spec serves; the new one failed


async def test_an_image_with_its_launcher_passes_the_check(world: World) -> None:
    await world.cycle()
    image = world.fleet.registry.add("eugr/spark-vllm-b12x:with-ray", lacks=frozenset({"py:sglang"})).pinned
    world.commit("eugr: ray", {EUGR: {"image": image, "launcher": "ray"}})
    result = await world.cycle()
    eugr = next(r for r in result.results if r.lane == EUGR)
    pull = next(s for s in result.plan.lane(EUGR).steps if s.kind == "pull")  # type: ignore[union-attr]
    assert pull.needs == ("vllm", "ray", "py:ray")  # type: ignore[union-attr]
    assert eugr.result in {"applied", "rolled-back"}, eugr  # past the check; what the stand-in does next is its own
    assert "the image has no" not in (eugr.error or "")


async def test_an_image_needing_a_newer_cuda_than_the_driver_gives_is_refused_after_the_pull(world: World) -> None:
    await world.cycle()
    before = ids(world)
    image = world.fleet.registry.add(
        "eugr/spark-vllm-b12x:cu131", env={"NVIDIA_REQUIRE_CUDA": "cuda>=13.1 brand=nvidia,driver>=590"}
    ).pinned
    world.commit("eugr: a CUDA 13.1 build", {EUGR: {"image": image}})

    result = await world.cycle()

    eugr = next(r for r in result.results if r.lane == EUGR)
    assert eugr.result == "failed", eugr
    assert "needs CUDA 13.1 or later (its NVIDIA_REQUIRE_CUDA), and the driver there supports CUDA 13.0" in (
        eugr.error or ""
    )
    assert ids(world) == before  # refused before any rank stopped
    # What the check spares: the NVIDIA runtime itself refuses such a container at start.
    status, _, err = await world.fleet.runtime("dgx5").execute(
        ["docker", "run", "-d", "--name", "probe-cu131", "--gpus", "all", image, "sleep"]
    )
    assert status == 127 and "unsatisfied condition: cuda>=13.1" in err
