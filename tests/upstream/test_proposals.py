"""Proposal branches end to end: a release appears -> a commit on a branch in a bare "forge" repo -> a pull request."""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import pytest

from reconciler.source.loadcommit import load_commit
from reconciler.spec.lane import Lane
from reconciler.spec.upstream import GitHubReleases
from reconciler.upstream import gitbranch
from reconciler.upstream.base import PollSettings
from reconciler.upstream.forge import ForgeSettings
from reconciler.upstream.gap import gap_rows
from reconciler.upstream.poll import poll_source
from reconciler.upstream.proposals import ProposalOutcome, ProposalSettings, propose_all
from reconciler.upstream.store import UpstreamStore
from tests.support.example import PRODUCTION, repo_files
from tests.support.signing import ssh_key, ssh_sign
from tests.support.upstreamcli import app, runner
from tests.upstream.conftest import VirtualClock
from tests.upstream.fixtures import local_upstreams, make_state_repo
from tests.upstream.servers import MULTI_ARCH, App, FakeForge, FakeGitHub, FakeRegistry, ImageKind, LocalServer

pytestmark = pytest.mark.timeout(60)

SGLANG = "sgl-project/sglang"
LANE_FILE = f"state/lanes/{PRODUCTION}.yaml"
BRANCH = f"lanes/proposals/{PRODUCTION}/0.5.22"
FORGE_TOKEN = "forge-token-5c1e77a0b9"
OLD_IMAGE = (
    "aidendle94/sparkrun-sglang-dsv41-gb10@sha256:f617afd81c627859d7b5900bdaf7c03f2a8bccbf8bf3c27b518a1b79ab3dea33"
)
DENY_ENTRY = b"""  - id: test-sglang-0522-deny
    engine: sglang
    versions: ">=0.5.22"
    when:
      args_include: [--trust-remote-code]
    severity: deny
    summary: a test entry that denies the proposed release
    action: wait for the next release
    ref: sgl-project/sglang#0
"""


@dataclass
class ProposalWorld:
    """Fake GitHub, registry and forge servers, a state repo with its bare remote, and the upstream store."""

    tmp: Path
    gh: FakeGitHub
    registry: FakeRegistry
    reg: LocalServer
    forge: FakeForge
    state: pygit2.Repository
    bare: pygit2.Repository
    store: UpstreamStore
    settings: ProposalSettings
    clock: VirtualClock
    github_url: str

    @property
    def source(self) -> GitHubReleases:
        return GitHubReleases(kind="github-releases", name="sglang-releases", repo=SGLANG, api_url=self.github_url)

    async def release(
        self, tag: str, published: str, *, platforms: tuple[str, ...] = MULTI_ARCH, kind: ImageKind = "oci-index"
    ) -> None:
        self.gh.add(SGLANG, tag, published)
        self.registry.add("lmsysorg/sglang", f"{tag}-cu130", platforms=platforms, kind=kind)
        result = await poll_source(self.source, self.store, self.settings.poll, clock=self.clock.clock())
        assert result.status in ("new", "unchanged"), result

    async def propose(self, **changes: Any) -> list[ProposalOutcome]:
        settings = self.settings.model_copy(update=changes) if changes else self.settings
        return await propose_all(self.state, self.store, settings, clock=self.clock.clock())

    def image(self, tag: str) -> str:
        return f"{self.reg.host}/lmsysorg/sglang@{self.registry.digest('lmsysorg/sglang', f'{tag}-cu130')}"


def track_block(registry: str, max_open: int = 1) -> bytes:
    return f"""# Follow SGLang releases: each new one becomes a proposal branch (tests).
track:
  source: sglang-releases
  image: "{registry}/lmsysorg/sglang:{{tag}}-cu130"
  versions: ">=0.5.21"
  max_open: {max_open}
""".encode()


async def build_world(
    tmp_path: Path,
    serve: Callable[[App], LocalServer],
    vclock: VirtualClock,
    *,
    kind: str = "github",
    deny: bool = False,
) -> ProposalWorld:
    gh = FakeGitHub((SGLANG,))
    gh.add(SGLANG, "v0.5.21", "2026-09-10T08:00:00Z")
    github = serve(gh)
    registry = FakeRegistry({"lmsysorg/sglang": ["v0.5.21-cu130"]})
    reg = serve(registry)
    forge = FakeForge(kind, "team/state", FORGE_TOKEN)
    forge_server = serve(forge)
    files = repo_files()
    files["state/upstreams.yaml"] = local_upstreams(github.url, reg.host, "/nonexistent/vllm.git", "/nonexistent/f.git")
    files[LANE_FILE] = files[LANE_FILE] + track_block(reg.host)
    if deny:
        files["policies/known-issues.yaml"] += DENY_ENTRY
    state = make_state_repo(tmp_path / "state", files)
    bare = pygit2.init_repository(str(tmp_path / "forge.git"), bare=True, initial_head="main")
    state.remotes.create("origin", bare.path)
    state.remotes["origin"].push(["refs/heads/main:refs/heads/main"])
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "forge-token").write_text(FORGE_TOKEN + "\n")
    poll = PollSettings(data_dir=tmp_path / "upstream", credentials_dir=creds)
    api_url = forge_server.url
    settings = ProposalSettings(
        forge=ForgeSettings(kind=kind, api_url=api_url, repo="team/state", token_credential="forge-token"),
        poll=poll,
    )
    store = UpstreamStore(tmp_path / "lanes.db")
    world = ProposalWorld(tmp_path, gh, registry, reg, forge, state, bare, store, settings, vclock, github.url)
    await world.release("v0.5.21", "2026-09-10T08:00:00Z")
    return world


@pytest.fixture
async def world(
    tmp_path: Path, serve: Callable[[App], LocalServer], vclock: VirtualClock
) -> AsyncIterator[ProposalWorld]:
    w = await build_world(tmp_path, serve, vclock)
    yield w
    w.store.close()


def blob_text(repo: pygit2.Repository, commit: pygit2.Commit, path: str) -> str:
    blob = repo[commit.tree[path].id]
    assert isinstance(blob, pygit2.Blob)
    return blob.data.decode()


def changed_lines(old: str, new: str) -> list[str]:
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]


async def test_a_new_release_becomes_a_proposal_branch_commit_and_pull_request(world: ProposalWorld) -> None:
    assert [(o.lane, o.action) for o in await world.propose()] == [(PRODUCTION, "none")]  # v0.5.21 predates the build
    await world.release("v0.5.22", "2026-10-19T08:00:00Z")
    (outcome,) = await world.propose()
    assert (outcome.action, outcome.version, outcome.branch, outcome.denied) == ("opened", "0.5.22", BRANCH, False)
    image = world.image("v0.5.22")
    assert outcome.image == image

    # The branch and its one commit exist in the bare "forge" repo, on top of main.
    commit = world.bare[world.bare.references[f"refs/heads/{BRANCH}"].target]
    assert isinstance(commit, pygit2.Commit) and str(commit.id) == outcome.commit
    main = world.bare[world.bare.references["refs/heads/main"].target]
    assert isinstance(main, pygit2.Commit)
    assert commit.parent_ids == [main.id]
    assert (commit.author.name, commit.author.email) == ("lanes", "lanes@localhost")
    message = commit.message
    assert message.splitlines()[0] == f"{PRODUCTION}: sglang 0.5.22 (v0.5.22)"
    assert f"Upstream release v0.5.22 of {SGLANG}, published 2026-10-19, from source sglang-releases." in message
    assert "Release notes: https://github.com/sgl-project/sglang/releases/tag/v0.5.22" in message
    assert message.rstrip("\n").split("\n\n")[-1].splitlines() == [
        f"Lane: {PRODUCTION}",
        "Upstream: sglang-releases v0.5.22",
        f"Image: {image}",
    ]
    assert gitbranch.trailers(message) == {"Lane": PRODUCTION, "Upstream": "sglang-releases v0.5.22", "Image": image}

    # The YAML diff is the two lines, comments and everything else untouched.
    diff = world.bare.diff(main, commit)
    assert (diff.stats.files_changed, diff.stats.insertions, diff.stats.deletions) == (1, 2, 2)
    old, new = blob_text(world.bare, main, LANE_FILE), blob_text(world.bare, commit, LANE_FILE)
    lines = changed_lines(old, new)
    assert lines[0] == "-engine_version: 0.0.0.dev1+gda64c5cbb       # sglang main at gda64c5cbb, torch 2.13+cu130"
    assert lines[1].startswith("+engine_version: 0.5.22 ")
    assert lines[1].endswith("# sglang main at gda64c5cbb, torch 2.13+cu130")
    assert lines[2:] == [f"-image: {OLD_IMAGE}", f"+image: {image}"]

    # The pull request the forge received.
    (post,) = world.forge.posts
    assert post.path == "/repos/team/state/pulls"
    assert post.headers["authorization"] == f"Bearer {FORGE_TOKEN}"
    body = post.json()
    text = body.pop("body")
    assert body == {"title": f"{PRODUCTION}: sglang 0.5.22 (v0.5.22)", "head": BRANCH, "base": "main"}
    assert text.startswith(
        f"Upstream release **v0.5.22** of `{SGLANG}` (published 2026-10-19) "
        f"qualifies for lane `{PRODUCTION}`'s track.\n"
        "Release notes: https://github.com/sgl-project/sglang/releases/tag/v0.5.22\n"
        "\n"
        f"| `{LANE_FILE}` | before | after |\n"
        "|---|---|---|\n"
        "| engine_version | `0.0.0.dev1+gda64c5cbb` | `0.5.22` |\n"
        f"| image | `{OLD_IMAGE}` | `{image}` |\n"
        "\n"
        f"Policy: `lanes check` passes at `{outcome.commit[:12]}`.\n"
    ), text
    # The production lane runs with under 10 GiB of headroom per rank (as its recipe measured): the
    # proposal carries that warning of the policy check, and nothing after it but who opened it.
    warnings = text.split("\nWarnings:\n", 1)[1]
    assert warnings.startswith("- memory-budget: ranks 0, 1, 2, 3 on dgx1, dgx2, dgx3, dgx4"), text
    assert warnings.endswith(f"\n\nOpened by lanes from branch `{BRANCH}` onto `main`.\n"), text
    assert outcome.pr_url == "https://forge.example/team/state/pulls/1"
    record = world.store.proposal(PRODUCTION, "0.5.22")
    assert record is not None and record.state == "open" and record.pr_url == outcome.pr_url
    assert record.upstream == "sglang-releases v0.5.22" and record.image == image and not record.denied

    # A second run neither pushes nor opens anything again.
    refs = sorted(world.bare.references)
    (again,) = await world.propose()
    assert again.action == "exists" and again.commit == outcome.commit
    assert len(world.forge.posts) == 1 and sorted(world.bare.references) == refs


async def test_at_most_max_open_per_lane_and_a_merged_proposal_frees_its_slot(world: ProposalWorld) -> None:
    await world.release("v0.5.22", "2026-10-19T08:00:00Z")
    (first,) = await world.propose()
    assert first.action == "opened"
    await world.release("v0.5.23", "2026-10-26T08:00:00Z")
    (limited,) = await world.propose()
    assert limited.action == "limited" and limited.version == "0.5.23"
    assert f"refs/heads/lanes/proposals/{PRODUCTION}/0.5.23" not in list(world.bare.references)
    # Someone merges the proposal on the forge (main fast-forwards to it): the slot is free again.
    assert first.commit is not None
    world.bare.references["refs/heads/main"].set_target(pygit2.Oid(hex=first.commit))
    (second,) = await world.propose()
    assert second.action == "opened" and second.version == "0.5.23"
    stored = world.store.proposal(PRODUCTION, "0.5.22")
    assert stored is not None and stored.state == "merged"
    commit = world.bare[world.bare.references[f"refs/heads/{second.branch}"].target]
    assert isinstance(commit, pygit2.Commit) and str(commit.parent_ids[0]) == first.commit
    assert [p.json()["head"] for p in world.forge.posts] == [BRANCH, second.branch]


async def test_a_denied_proposal_is_still_opened_and_marked(
    tmp_path: Path, serve: Callable[[App], LocalServer], vclock: VirtualClock
) -> None:
    world = await build_world(tmp_path, serve, vclock, deny=True)
    try:
        await world.release("v0.5.22", "2026-10-19T08:00:00Z")
        (outcome,) = await world.propose()
        assert outcome.action == "opened" and outcome.denied
        assert any("known-issues" in d and "test entry that denies" in d for d in outcome.denial)
        assert f"refs/heads/{BRANCH}" in list(world.bare.references)
        body = world.forge.posts[0].json()
        assert body["title"] == f"[denied] {PRODUCTION}: sglang 0.5.22 (v0.5.22)"
        assert body["body"].startswith(f"> **Denied by policy** at `{outcome.commit[:12] if outcome.commit else ''}`")
        assert "test entry that denies" in body["body"] and "passes" not in body["body"]
        record = world.store.proposal(PRODUCTION, "0.5.22")
        assert record is not None and record.denied and record.denial == outcome.denial
    finally:
        world.store.close()


async def test_a_second_proposer_adopts_the_branch_on_the_remote_instead_of_duplicating_it(
    world: ProposalWorld,
) -> None:
    await world.release("v0.5.22", "2026-10-19T08:00:00Z")
    (mine,) = await world.propose()
    other = pygit2.clone_repository(world.bare.path, str(world.tmp / "other-clone"))
    with UpstreamStore(world.tmp / "other.db") as other_store:
        await poll_source(world.source, other_store, world.settings.poll, clock=world.clock.clock())
        (theirs,) = await propose_all(other, other_store, world.settings, clock=world.clock.clock())
    assert theirs.action == "adopted" and theirs.commit == mine.commit and theirs.pr_url == mine.pr_url
    assert len(world.forge.posts) == 1


async def test_a_rejected_push_is_fetched_and_the_same_proposal_adopted(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.release("v0.5.22", "2026-10-19T08:00:00Z")
    (mine,) = await world.propose()
    # A second proposer that fetched before the first one pushed: its push of a commit of its own is rejected.
    other = pygit2.clone_repository(world.bare.path, str(world.tmp / "late-clone"))
    other.references.delete(f"refs/remotes/origin/{BRANCH}")
    real_fetch = gitbranch.fetch
    calls: list[str] = []

    def stale_first_fetch(repo: pygit2.Repository, remote: str, creds: Any = None) -> None:
        calls.append(remote)
        if len(calls) > 1:
            real_fetch(repo, remote, creds)

    monkeypatch.setattr(gitbranch, "fetch", stale_first_fetch)
    with UpstreamStore(world.tmp / "late.db") as late_store:
        await poll_source(world.source, late_store, world.settings.poll, clock=world.clock.clock())
        (theirs,) = await propose_all(
            other, late_store, world.settings.model_copy(update={"author_name": "lanes-2"}), clock=world.clock.clock()
        )
        assert theirs.action == "adopted" and theirs.commit == mine.commit
        assert len(calls) == 2  # the start-of-run fetch (stale), then the fetch after the rejection
        assert str(other.references[f"refs/heads/{BRANCH}"].target) == mine.commit
    assert len(world.forge.posts) == 1  # the open pull request was found, not opened twice


async def test_gitea_and_forgejo_pull_requests(
    tmp_path: Path, serve: Callable[[App], LocalServer], vclock: VirtualClock
) -> None:
    world = await build_world(tmp_path, serve, vclock, kind="gitea")
    try:
        await world.release("v0.5.22", "2026-10-19T08:00:00Z")
        (outcome,) = await world.propose()
        (post,) = world.forge.posts
        assert post.path == "/api/v1/repos/team/state/pulls"
        assert post.headers["authorization"] == f"token {FORGE_TOKEN}"
        assert post.json()["head"] == BRANCH and post.json()["base"] == "main"
        assert outcome.pr_url == "https://forge.example/team/state/pulls/1"
    finally:
        world.store.close()


async def test_without_a_remote_the_branch_is_made_locally_and_nothing_is_sent(world: ProposalWorld) -> None:
    await world.release("v0.5.22", "2026-10-19T08:00:00Z")
    (outcome,) = await world.propose(remote=None)
    assert outcome.action == "opened" and outcome.pr_url is None
    assert str(world.state.references[f"refs/heads/{BRANCH}"].target) == outcome.commit
    assert world.forge.posts == [] and f"refs/heads/{BRANCH}" not in list(world.bare.references)


def test_lanes_propose_cli_opens_the_proposal_and_prints_json(
    tmp_path: Path, serve: Callable[[App], LocalServer], vclock: VirtualClock
) -> None:
    world = asyncio.run(build_world(tmp_path, serve, vclock))
    try:
        asyncio.run(world.release("v0.5.22", "2026-10-19T08:00:00Z"))
        forge = world.settings.forge
        assert forge is not None
        args = [
            "propose",
            "--repo",
            world.state.workdir,
            "--db",
            str(tmp_path / "lanes.db"),
            "--json",
            "--forge",
            "github",
            "--forge-url",
            forge.api_url,
            "--forge-repo",
            "team/state",
            "--forge-token",
            "forge-token",
            "--secrets-dir",
            str(tmp_path / "credentials"),
        ]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["ok"] is True
        (proposal,) = out["proposals"]
        assert proposal["action"] == "opened" and proposal["branch"] == BRANCH
        assert proposal["pr_url"] == "https://forge.example/team/state/pulls/1" and proposal["denial"] == []
        local = ["propose", "--repo", world.state.workdir, "--db", str(tmp_path / "lanes.db"), "--remote", ""]
        text = runner.invoke(app, local, env={"COLUMNS": "200"})
        assert text.exit_code == 0, text.output
        assert f"exists   {PRODUCTION}: 0.5.22 on {BRANCH}" in text.stdout
        assert "already proposed (open)" in text.stdout
    finally:
        world.store.close()


async def test_an_image_without_linux_arm64_is_neither_proposed_nor_tried(world: ProposalWorld) -> None:
    tried: list[str] = []

    async def trial(lane: Lane, commit: str, branch: str) -> str:
        tried.append(branch)
        return "### Trial on spare hosts\n"

    await world.release("v0.5.22", "2026-10-19T08:00:00Z", platforms=("linux/amd64",), kind="docker-list")
    image = world.image("v0.5.22")
    (outcome,) = await propose_all(world.state, world.store, world.settings, clock=world.clock.clock(), trial=trial)
    assert (outcome.action, outcome.version, outcome.branch, outcome.image) == ("no-arm64", "0.5.22", None, image)
    assert "has no linux/arm64 image (linux/amd64)" in outcome.message
    assert f"refs/heads/{BRANCH}" not in list(world.bare.references) and f"refs/heads/{BRANCH}" not in list(
        world.state.references
    )
    assert world.forge.posts == [] and tried == [] and world.store.proposal(PRODUCTION, "0.5.22") is None
    recorded = world.store.release("sglang-releases", "v0.5.22")
    assert recorded is not None and (recorded.platforms, recorded.platforms_image) == (("linux/amd64",), image)

    # The gap table says why for that release.
    rows = {r.lane: r for r in gap_rows(load_commit(world.state, "main", "state", "policies").desired, world.store)}
    row = rows[PRODUCTION]
    assert row.no_arm64 == ("0.5.22: no linux/arm64 image (linux/amd64)",)
    assert row.summary.endswith("; 0.5.22: no linux/arm64 image (linux/amd64)")

    # Asked again, the digest is known: no manifest is read again, and still nothing is proposed.
    reads = len([r for r in world.reg.requests if r.method == "GET" and "/manifests/" in r.path])
    (again,) = await world.propose()
    assert again.action == "no-arm64"
    assert len([r for r in world.reg.requests if r.method == "GET" and "/manifests/" in r.path]) == reads

    # The tag pushed again with an arm64 build (a new digest): now it is proposed.
    world.registry.add("lmsysorg/sglang", "v0.5.22-cu130", platforms=("linux/arm64",), kind="oci-manifest")
    (proposed,) = await world.propose()
    assert proposed.action == "opened" and proposed.image == world.image("v0.5.22") != image


async def test_a_single_arch_arm64_manifest_is_proposed(world: ProposalWorld) -> None:
    await world.release("v0.5.22", "2026-10-19T08:00:00Z", platforms=("linux/arm64/v8",), kind="docker-manifest")
    (outcome,) = await world.propose()
    assert outcome.action == "opened" and outcome.image == world.image("v0.5.22")
    blobs = [r for r in world.reg.requests if "/blobs/" in r.path]
    assert len(blobs) == 1  # the config blob, which names the architecture
    recorded = world.store.release("sglang-releases", "v0.5.22")
    assert recorded is not None and recorded.platforms == ("linux/arm64/v8",)


def test_lanes_propose_with_signing_on_starts_only_from_a_commit_the_daemon_accepts(
    tmp_path: Path, serve: Callable[[App], LocalServer], vclock: VirtualClock
) -> None:
    """A person's `lanes propose --config` with the daemon's signing settings: an unsigned head (anyone with push
    access) is not built on; once an allowed key signs the head, the proposal is made from it."""
    world = asyncio.run(build_world(tmp_path, serve, vclock))
    try:
        asyncio.run(world.release("v0.5.22", "2026-10-19T08:00:00Z"))
        keys = tmp_path / "keys"
        keys.mkdir()
        alice = ssh_key(keys, "alice")
        allowed = keys / "allowed_signers"
        allowed.write_text(
            f'alice@example.org namespaces="git" {" ".join(Path(f"{alice}.pub").read_text().split()[:2])}\n'
        )
        config = tmp_path / "reconciler.toml"
        config.write_text(
            f'[repo]\nurl = "{world.state.workdir}"\nrequire_signed_commits = "ssh"\nallowed_signers = "{allowed}"\n'
        )
        args = ["propose", "--repo", world.state.workdir, "--db", str(tmp_path / "lanes.db"), "--remote", ""]
        refused = runner.invoke(app, [*args, "--config", str(config)], env={"COLUMNS": "200"})
        assert refused.exit_code != 0, refused.output
        assert "a commit lanes would not act on" in refused.output and "is not signed" in refused.output
        assert f"refs/heads/{BRANCH}" not in list(world.state.references)

        head = world.state.references["refs/heads/main"].peel(pygit2.Commit)
        who = pygit2.Signature("Alice Operator", "alice@example.org")
        content = str(world.state.create_commit_string(who, who, "signed\n", head.tree.id, [head.id]))
        signed = world.state.create_commit_with_signature(content, ssh_sign(alice, content))
        world.state.references.create("refs/heads/main", signed, force=True)
        made = runner.invoke(app, [*args, "--config", str(config), "--json"])
        assert made.exit_code == 0, made.output
        (proposal,) = json.loads(made.stdout)["proposals"]
        assert proposal["action"] == "opened"
        branch_head = world.state.references[f"refs/heads/{BRANCH}"].peel(pygit2.Commit)
        assert [str(p.id) for p in branch_head.parents] == [str(signed)]
    finally:
        world.store.close()
