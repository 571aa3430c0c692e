"""Bench profiles: the file format, the repo's own profiles, choosing a lane's profile."""

from __future__ import annotations

import pytest

from reconciler.bench.service import lane_url, resolve_profile
from reconciler.errors import InputError
from reconciler.spec.bench import BenchProfile, BenchProfilesFile, load_bench_profiles
from tests.support.example import EUGR, PRODUCTION, example_state, repo_files, with_lane

pytestmark = pytest.mark.timeout(10)


def test_the_repos_profiles_load_and_fit_every_example_lane() -> None:
    profiles = load_bench_profiles(repo_files())
    assert {"default", "quick"} <= set(profiles.profiles)
    assert profiles.profiles["quick"].name == "quick"
    state = example_state()
    for lane in state.lanes.values():
        assert resolve_profile(profiles, lane).name == (lane.bench_profile or "default")
        assert resolve_profile(profiles, lane, "quick").pp == (512,)


def test_a_repo_without_the_file_gets_the_builtin_default() -> None:
    profiles = load_bench_profiles({})
    assert list(profiles.profiles) == ["default"] and profiles.profiles["default"].pp == (2048,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"profiles:\n  a:\n    pp: [0]\n", "pp"),
        (b"profiles:\n  a:\n    pp: [512, 512]\n", "twice"),
        (b"profiles:\n  a:\n    name: b\n", "says its name is 'b'"),
        (b"profiles:\n  a:\n    depth: [-1]\n", "depth"),
        (b"profiles:\n  a:\n    repetitons: 3\n", "repetitons"),
        (b"profiles:\n  a:\n    api: grpc\n", "api"),
    ],
)
def test_bad_profiles_name_file_and_line(text: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        load_bench_profiles({"state/bench-profiles.yaml": text})
    assert err.value.file == "state/bench-profiles.yaml" and err.value.line is not None


def test_choosing_a_profile() -> None:
    state = example_state()
    lane = state.lanes[PRODUCTION]
    profiles = BenchProfilesFile(profiles={"default": BenchProfile(name="default"), "big": BenchProfile(name="big")})
    assert resolve_profile(profiles, lane, "big").name == "big"
    with pytest.raises(InputError, match=r"no bench profile 'nope' \(known: big, default\)"):
        resolve_profile(profiles, lane, "nope")
    huge = BenchProfilesFile(profiles={"default": BenchProfile(name="default", depth=(300_000,))})
    with pytest.raises(InputError, match="max_model_len 262144"):
        resolve_profile(huge, lane)


def test_the_url_is_the_head_hosts_address_and_the_lanes_port() -> None:
    state = example_state()
    assert lane_url(state, state.lanes[PRODUCTION]) == "http://10.20.0.11:8000"
    assert lane_url(state, state.lanes[EUGR]) == "http://10.20.0.15:8000"
    moved = with_lane(state, EUGR, port=8012)
    assert lane_url(moved, moved.lanes[EUGR]).endswith(":8012")


def test_a_profile_written_inline_in_the_lane_file_is_used() -> None:
    from reconciler.bench.service import resolve_profile
    from reconciler.spec.bench import BenchProfile as Profile
    from reconciler.spec.load import load_desired
    from tests.support.example import PRODUCTION, repo_files

    files = repo_files()
    path = f"state/lanes/{PRODUCTION}.yaml"
    inline = b"bench_profile: {pp: [256], tg: [16], repetitions: 2}"
    files[path] = files[path].replace(b"bench_profile: default", inline)
    desired = load_desired(files, "c" * 40)
    lane = desired.lanes[PRODUCTION]
    assert isinstance(lane.bench_profile, Profile) and lane.bench_profile.name == PRODUCTION
    assert desired.bench_profiles is not None
    chosen = resolve_profile(desired.bench_profiles, lane)
    assert chosen.pp == (256,) and chosen.tg == (16,) and chosen.repetitions == 2
    assert resolve_profile(desired.bench_profiles, lane, "quick").name == "quick"
