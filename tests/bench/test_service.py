"""`benchmark_lane`: what the daemon calls after a lane turned healthy."""

from __future__ import annotations

import pytest

from reconciler.bench import benchmark_lane, evidence
from reconciler.errors import InputError
from reconciler.spec.bench import BenchProfile, BenchProfilesFile
from tests.support.example import PRODUCTION, example_state

from . import fakeengine

pytestmark = pytest.mark.timeout(30)

PROFILES = BenchProfilesFile(
    profiles={"default": BenchProfile(name="default", pp=(256,), tg=(4,), depth=(0, 128), repetitions=2)}
)


async def test_the_lane_of_a_commit_is_benchmarked_at_its_head_hosts_port() -> None:
    state = example_state()
    lane = state.lanes[PRODUCTION]
    transport = fakeengine.transport(model=lane.served_name)  # no packet leaves: the transport answers
    seen: list[int] = []
    first = await benchmark_lane(
        state, PRODUCTION, profiles=PROFILES, transport=transport, progress=lambda p: seen.append(p.done)
    )
    assert first["url"] == "http://10.20.0.11:8000" and first["model"] == "deepseek-v4.1-flash"
    assert first["lane"] == PRODUCTION and first["commit"] == state.commit
    assert first["engine"] == "sglang" and first["engine_version"] == lane.engine_version
    assert first["image"] == lane.image and first["image_digest"] == lane.image.split("@", 1)[1]
    assert first["hosts"] == list(lane.hosts) and first["profile"]["name"] == "default"
    assert [r["context_size"] for r in first["benchmarks"]] == [0, 128]
    assert seen == sorted(seen) and seen
    second = await benchmark_lane(state, PRODUCTION, profiles=PROFILES, baseline=first, transport=transport)
    assert second["comparison"]["matched_rows"] == 2 and second["comparison"]["baseline"]["commit"] == state.commit
    assert evidence.evidence_path(second).startswith(f"evidence/{PRODUCTION}/")
    assert [k for k, _ in evidence.trailers(second)][:2] == ["Lane", "Evidence-For"]


async def test_unknown_lanes_and_profiles_are_input_errors() -> None:
    state = example_state()
    with pytest.raises(InputError, match="no lane 'nope'"):
        await benchmark_lane(state, "nope", profiles=PROFILES)
    with pytest.raises(InputError, match="no bench profile 'quick'"):
        await benchmark_lane(state, PRODUCTION, profiles=PROFILES, profile="quick")


async def test_the_commits_own_profiles_are_used_by_default() -> None:
    state = example_state()
    assert state.bench_profiles is not None  # loaded with the state from state/bench-profiles.yaml
    transport = fakeengine.transport(model=state.lanes[PRODUCTION].served_name)
    ev = await benchmark_lane(state, PRODUCTION, profile="quick", transport=transport)
    assert ev["profile"] == state.bench_profiles.profiles["quick"].model_dump(mode="json")
    assert [(r["prompt_size"], r["response_size"]) for r in ev["benchmarks"]] == [(512, 32)]
