"""A token goes only where the daemon's settings send it: never to a URL the state repository chose (issue 14).

`state/upstreams.yaml` is written by anyone with push access. It names each
source's URL (`api_url`, `registry`, `insecure`) and may ask for a token by
name (`token_credential`), but which token may go to which host, and only
over https, is the daemon's settings (`[upstream.credentials.<name>]`). The
pollers run here as the daemon's upstream job runs them (`upstream_job` with
the settings parsed from TOML), against plain-HTTP servers on loopback that
record every header they receive.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from reconciler.daemon.config import DaemonConfig, parse_config
from reconciler.daemon.metrics import Metrics
from reconciler.daemon.upstreamjob import upstream_job
from reconciler.source.mirror import Mirror
from reconciler.spec.load import load_desired
from reconciler.upstream.store import UpstreamStore
from tests.support.example import repo_files
from tests.upstream.servers import FakeGitHub, FakeRegistry, LocalServer

pytestmark = pytest.mark.timeout(60)

GITHUB_TOKEN = "ghp_daemonOwnToken0123456789abcdef"
WEBHOOK_SECRET = "whsec_daemonWebhookSecret0123456789"
REPO = "lmsysorg/sglang"


def credentials_dir(tmp_path: Path) -> Path:
    """The unit's layout: the daemon's own credentials in $CREDENTIALS_DIRECTORY, lane secrets as lane_<name>."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "github-token").write_text(GITHUB_TOKEN + "\n")
    (creds / "webhook-secret").write_text(WEBHOOK_SECRET + "\n")
    (creds / "lane_hf-token").write_text("hf_laneSecret0123456789\n")
    return creds


def daemon_config(tmp_path: Path, creds: Path, upstream: str = "") -> DaemonConfig:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return parse_config(
        f'[repo]\nurl = "{tmp_path}/repo"\nmirror_dir = "{tmp_path}/mirror"\n'
        f'[ssh]\nkey = "{tmp_path}/key"\nknown_hosts = "{tmp_path}/kh"\n'
        f'[daemon]\ndb = "{tmp_path}/lanes.db"\n'
        '[http]\nwebhook_secret_file = "$CREDENTIALS_DIRECTORY/webhook-secret"\n'
        f"[upstream]\nenabled = true\n{upstream}",
        env={"CREDENTIALS_DIRECTORY": str(creds), "HOME": str(tmp_path)},
    )


async def run_job(tmp_path: Path, config: DaemonConfig, sources: str) -> dict[str, tuple[str, str | None]]:
    """The daemon's upstream job over `sources`, beside the names the example lanes refer to."""
    files = repo_files()
    names = ("sglang-releases", "vllm-releases", "vllm-main", "flare-main")
    referred = "".join(
        f'  - {{kind: git-head, name: {n}, url: "{tmp_path / "missing.git"}"}}\n' for n in names if n not in sources
    )
    files["state/upstreams.yaml"] = f"sources:\n{sources}{referred}".encode()
    desired = load_desired(files, "c" * 40)
    await upstream_job(config, desired, Mirror(str(tmp_path / "repo"), tmp_path / "mirror"), Metrics())
    with UpstreamStore(config.daemon.db) as store:
        return {
            name: ("failed" if state.last_error else "polled", state.last_error)
            for name in ("sglang-releases", "vllm-releases", "gh-none", "oci-webhook", "gh-declared")
            if (state := store.poll_state(name)).last_poll is not None
        }


def leaked(server: LocalServer, *secrets: str) -> list[str]:
    """Every header a server received that carries one of `secrets` (plain or in a Basic pair)."""
    out = []
    for request in server.requests:
        for key, value in request.headers.items():
            decoded = ""
            if value.lower().startswith("basic "):
                decoded = base64.b64decode(value.split(" ", 1)[1]).decode(errors="replace")
            if any(s in value or s in decoded for s in secrets):
                out.append(f"{request.method} {request.target} {key}")
    return out


async def test_a_repo_chosen_url_never_receives_the_daemons_tokens(tmp_path: Path) -> None:
    """The attack of the issue: upstreams.yaml points sources at a plain-HTTP server and names the daemon's tokens."""
    creds = credentials_dir(tmp_path)
    gh = FakeGitHub(("sgl-project/sglang", "vllm-project/vllm"))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T12:00:00Z")
    gh.add("vllm-project/vllm", "v0.32.0", "2026-10-19T12:00:00Z")
    github = LocalServer(gh)
    registry = LocalServer(FakeRegistry({REPO: ["v0.5.22"]}))
    try:
        config = daemon_config(tmp_path, creds)
        results = await run_job(
            tmp_path,
            config,
            f'  - {{kind: github-releases, name: sglang-releases, repo: sgl-project/sglang, api_url: "{github.url}", '
            "token_credential: webhook-secret}\n"
            f'  - {{kind: github-releases, name: vllm-releases, repo: vllm-project/vllm, api_url: "{github.url}", '
            "token_credential: github-token}\n"
            f'  - {{kind: github-releases, name: gh-none, repo: sgl-project/sglang, api_url: "{github.url}"}}\n'
            f"  - {{kind: oci, name: oci-webhook, registry: '{registry.host}', repository: {REPO}, insecure: true, "
            "token_credential: webhook-secret}\n",
        )
        assert leaked(github, GITHUB_TOKEN, WEBHOOK_SECRET) == []
        assert leaked(registry, GITHUB_TOKEN, WEBHOOK_SECRET) == []
        assert all("authorization" not in r.headers for r in github.requests)
        # Named tokens the settings do not declare fail their poll, said so; the anonymous source still polls.
        assert results["sglang-releases"][0] == "failed" and "not declared" in str(results["sglang-releases"][1])
        assert results["vllm-releases"][0] == "failed" and "not declared" in str(results["vllm-releases"][1])
        assert results["oci-webhook"][0] == "failed"
        assert results["gh-none"] == ("polled", None)
    finally:
        github.close()
        registry.close()


async def test_a_declared_token_goes_only_to_its_hosts_and_only_over_https(tmp_path: Path) -> None:
    creds = credentials_dir(tmp_path)
    gh = FakeGitHub(("sgl-project/sglang",))
    gh.add("sgl-project/sglang", "v0.5.22", "2026-10-19T12:00:00Z")
    github = LocalServer(gh)
    try:
        source = (
            f'  - {{kind: github-releases, name: gh-declared, repo: sgl-project/sglang, api_url: "{github.url}", '
            "token_credential: github-token}\n"
            f'  - {{kind: github-releases, name: gh-none, repo: sgl-project/sglang, api_url: "{github.url}"}}\n'
        )
        declared = '[upstream.credentials.github-token]\nfile = "$CREDENTIALS_DIRECTORY/github-token"\n'
        # Declared for api.github.com: the repo's loopback URL gets nothing, named or not.
        elsewhere = daemon_config(tmp_path / "a", creds, declared + 'hosts = ["api.github.com"]\n')
        results = await run_job(tmp_path, elsewhere, source)
        assert "may not be sent to 127.0.0.1" in str(results["gh-declared"][1])
        assert results["gh-none"] == ("polled", None)
        assert leaked(github, GITHUB_TOKEN) == [] and all("authorization" not in r.headers for r in github.requests)

        # Declared for this host, but the URL is plain http: still nothing.
        plain = daemon_config(tmp_path / "b", creds, declared + 'hosts = ["127.0.0.1"]\n')
        results = await run_job(tmp_path, plain, source)
        assert "not sent over plain http" in str(results["gh-declared"][1])
        assert leaked(github, GITHUB_TOKEN) == []

        # Positive control: with loopback allowed plain http in the daemon's settings, the token is sent.
        allowed = daemon_config(
            tmp_path / "c",
            creds,
            'allow_insecure_hosts = ["127.0.0.1"]\n' + declared + 'hosts = ["127.0.0.1"]\n',
        )
        results = await run_job(tmp_path, allowed, source)
        assert results["gh-declared"] == ("polled", None)
        assert any(r.headers.get("authorization") == f"Bearer {GITHUB_TOKEN}" for r in github.requests)
    finally:
        github.close()


def test_plain_http_hosts_for_tokens_are_loopback_only(tmp_path: Path) -> None:
    from reconciler.errors import InputError

    creds = credentials_dir(tmp_path)
    with pytest.raises(InputError, match="not a loopback host"):
        daemon_config(tmp_path, creds, 'allow_insecure_hosts = ["evil.example.com"]\n')


async def test_the_forge_token_goes_over_https_only() -> None:
    import httpx

    from reconciler.errors import PermanentError
    from reconciler.upstream.forge import ForgeSettings, open_pull

    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[])

    forge = ForgeSettings(kind="gitea", api_url="http://forge.example.com", repo="team/state")
    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        with pytest.raises(PermanentError, match="not sent over plain http"):
            await open_pull(client, forge, GITHUB_TOKEN, title="t", head="h", base="main", body="b")
    assert seen == []
