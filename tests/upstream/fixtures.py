"""Shared builders: the note's releases in a store, state repos on a `main` branch, local upstreams files."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pygit2

from reconciler.upstream.store import HeadRecord, ReleaseRecord, UpstreamStore
from tests.support.gitrepo import commit_files

VLLM_DATES = {
    27: "2026-06-24",
    28: "2026-07-15",
    29: "2026-08-05",
    30: "2026-08-26",
    31: "2026-09-23",
    32: "2026-10-18",
}
"""vLLM 0.27.0 .. 0.32.0; the note gives 2026-10-18 for 0.32.0, the earlier dates are placeholders."""
EUGR_COMMIT = "8244d1c44" + "5f0e3a7b21c9d84e6f1a0b3c57d2e9f4a6b8"[:31]


def epoch(day: str) -> float:
    return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()


def feed_note_releases(store: UpstreamStore) -> None:
    """What the pollers would have recorded by 2026-10-23, the date of the note."""
    for minor, day in VLLM_DATES.items():
        tag = f"v0.{minor}.0"
        store.record_release(
            ReleaseRecord(
                "vllm-releases",
                tag,
                f"0.{minor}.0",
                published=f"{day}T17:00:00Z",
                url=f"https://github.com/vllm-project/vllm/releases/tag/{tag}",
                notes_url=f"https://github.com/vllm-project/vllm/releases/tag/{tag}",
                first_seen=epoch(day),
            )
        )
    for tag, day, pre in (
        ("v0.5.21", "2026-09-10", False),
        ("v0.5.22", "2026-10-19", False),
        ("v0.6.0rc1", "2026-10-21", True),
    ):
        store.record_release(
            ReleaseRecord(
                "sglang-releases", tag, tag[1:], published=f"{day}T08:00:00Z", prerelease=pre, first_seen=epoch(day)
            )
        )
    # vLLM main: the head seen on 2026-10-15 is the eugr build's commit; a day later two more landed.
    base = HeadRecord(
        "vllm-main",
        "main",
        EUGR_COMMIT,
        epoch("2026-10-15"),
        ((EUGR_COMMIT, "[Kernel] b12x MoE for SM121"),),
        epoch("2026-10-15"),
    )
    later = HeadRecord(
        "vllm-main",
        "main",
        "b" * 40,
        epoch("2026-10-16"),
        (("b" * 40, "[Docs] DCP on GB10"), ("c" * 40, "[Bugfix] NVFP4 KV scale")),
        epoch("2026-10-16"),
    )
    store.record_head(base)
    store.record_head(later)


def make_state_repo(path: Path, files: Mapping[str, bytes]) -> pygit2.Repository:
    repo = pygit2.init_repository(str(path), bare=False, initial_head="main")
    commit_files(repo, files)
    return repo


def local_upstreams(github: str, registry: str, vllm_main: str, flare_main: str) -> bytes:
    """state/upstreams.yaml with every source served from this machine."""
    return f"""# Every source on a local server or a local bare repository (tests).
sources:
  - kind: github-releases
    name: sglang-releases
    repo: sgl-project/sglang
    api_url: {github}
  - kind: github-releases
    name: vllm-releases
    repo: vllm-project/vllm
    api_url: {github}
  - kind: git-head
    name: vllm-main
    url: {vllm_main}
  - kind: git-head
    name: flare-main
    url: {flare_main}
  - kind: oci
    name: eugr-b12x
    registry: {registry}
    repository: eugr/spark-vllm-b12x
    tag_filter: ^nightly-
    insecure: true
  - kind: oci
    name: sglang-images
    registry: {registry}
    repository: lmsysorg/sglang
    tag_filter: -cu130$
    insecure: true
""".encode()
