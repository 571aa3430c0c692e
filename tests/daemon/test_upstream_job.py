"""The daemon's upstream job: polls local GitHub-like servers and exports the gap as metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.daemon.config import parse_config
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.upstreamjob import upstream_job
from reconciler.source.mirror import Mirror
from reconciler.spec.load import load_desired
from tests.support.example import GLM, PRODUCTION, repo_files
from tests.upstream.servers import FakeGitHub, LocalServer

pytestmark = pytest.mark.timeout(60)


async def test_the_job_polls_and_sets_the_gap_gauges(tmp_path: Path) -> None:
    gh = FakeGitHub(("sgl-project/sglang", "vllm-project/vllm"))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T12:00:00Z")
    for minor, day in zip(range(27, 33), ("08-01", "08-20", "09-05", "09-20", "10-02", "10-18"), strict=True):
        gh.add("vllm-project/vllm", f"v0.{minor}.0", f"2026-{day}T12:00:00Z")
    server = LocalServer(gh)
    try:
        files = repo_files()
        files["state/upstreams.yaml"] = f"""sources:
  - {{kind: github-releases, name: sglang-releases, repo: sgl-project/sglang, api_url: "{server.url}"}}
  - {{kind: github-releases, name: vllm-releases, repo: vllm-project/vllm, api_url: "{server.url}"}}
  - {{kind: git-head, name: vllm-main, url: "{tmp_path / "missing-vllm.git"}"}}
  - {{kind: git-head, name: flare-main, url: "{tmp_path / "missing-flare.git"}"}}
""".encode()
        desired = load_desired(files, "c" * 40)
        config = parse_config(
            f'[repo]\nurl = "{tmp_path}/repo"\nmirror_dir = "{tmp_path}/mirror"\n'
            f'[ssh]\nkey = "{tmp_path}/key"\nknown_hosts = "{tmp_path}/kh"\n'
            f'[daemon]\ndb = "{tmp_path}/lanes.db"\n[upstream]\nenabled = true\n'
        )
        metrics = Metrics()
        await upstream_job(config, desired, Mirror(str(tmp_path / "repo"), tmp_path / "mirror"), metrics)
        body, _ = metrics.render()
        text = body.decode()
        assert f'lanes_upstream_releases_behind{{lane="{GLM}"}} 6.0' in text
        assert f'lanes_upstream_releases_behind{{lane="{PRODUCTION}"}} 1.0' in text
        assert f'lanes_upstream_days_behind{{lane="{PRODUCTION}"}} 20.0' in text
    finally:
        server.close()
