"""Benchmark a lane of a commit: the one call the CLI and the daemon make.

`benchmark_lane` resolves the lane's endpoint (head host address and port)
and profile, checks the profile fits the lane's context window, runs it,
and returns the evidence dict (compared with `baseline` when one is given).
Writing the file, the chart and the commit is the caller's part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from reconciler.bench.evidence import LaneIdentity, build_evidence
from reconciler.bench.runner import ProgressFn, run_profile
from reconciler.errors import InputError
from reconciler.spec.bench import DEFAULT_PROFILE, BenchProfile, BenchProfilesFile
from reconciler.spec.lane import Lane
from reconciler.spec.load import DesiredState


def lane_url(desired: DesiredState, lane: Lane) -> str:
    """`http://<head host address>:<port>`, the endpoint the lane serves on."""
    host = desired.hosts.get(lane.head)
    if host is None:
        raise InputError(f"lane '{lane.name}': head host '{lane.head}' is not defined", field="hosts")
    address = f"[{host.address}]" if ":" in host.address else host.address
    return f"http://{address}:{lane.port}"


def resolve_profile(profiles: BenchProfilesFile, lane: Lane, name: str | None = None) -> BenchProfile:
    """The profile asked for, else the lane's `bench_profile`, else `default`; it must fit the lane."""
    profile: BenchProfile | None
    if name is None and isinstance(lane.bench_profile, BenchProfile):
        wanted, profile = f"{lane.name} (inline)", lane.bench_profile
    else:
        named = lane.bench_profile if isinstance(lane.bench_profile, str) else None
        wanted = name or named or DEFAULT_PROFILE
        profile = profiles.get(wanted)
    if profile is None:
        known = ", ".join(sorted(profiles.profiles)) or "none"
        raise InputError(f"no bench profile '{wanted}' (known: {known})", field="profile")
    if profile.longest_context() > lane.max_model_len:
        raise InputError(
            f"bench profile '{wanted}' needs {profile.longest_context()} tokens per request "
            f"(pp {max(profile.pp)} + depth {max(profile.depth)} + tg {max(profile.tg)}) but lane "
            f"'{lane.name}' has max_model_len {lane.max_model_len}",
            field="profile",
        )
    return profile


async def benchmark_lane(
    desired: DesiredState,
    lane_name: str,
    *,
    profiles: BenchProfilesFile | None = None,
    profile: str | None = None,
    url: str | None = None,
    baseline: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Benchmark `lane_name` as `desired` (one commit) describes it; returns the evidence dict.

    Profiles default to the commit's own (`desired.bench_profiles`), else the built-in `default`.
    """
    lane = desired.lanes.get(lane_name)
    if lane is None:
        known = ", ".join(sorted(desired.lanes)) or "none"
        raise InputError(f"no lane '{lane_name}' at {desired.commit[:12]} (known: {known})", field="LANE")
    if profiles is None:
        profiles = desired.bench_profiles or BenchProfilesFile(
            profiles={DEFAULT_PROFILE: BenchProfile(name=DEFAULT_PROFILE)}
        )
    chosen = resolve_profile(profiles, lane, profile)
    run = await run_profile(
        chosen,
        url=url or lane_url(desired, lane),
        model=lane.served_name,
        progress=progress,
        transport=transport,
    )
    return build_evidence(run, LaneIdentity.of(lane, desired.commit), baseline=baseline)
