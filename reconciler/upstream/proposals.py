"""Turn a new qualifying release into a proposal branch (and a pull request) for each tracking lane.

Following upstream by hand is where lanes fall weeks behind (the note's
production lane sat three weeks behind SGLang v0.5.22). A lane that declares
`track:` gets, for the newest release that qualifies, a branch
`lanes/proposals/<lane>/<version>` whose one commit changes the lane's image
(the track's template, pinned to the digest the registry resolves) and
engine_version, on top of the head of the tracked branch (in the daemon: the
last commit it verified and decided, `base=`, never the fetched head). The commit is
checked against the policies first; a denial does not stop the proposal
(the gap stays visible) but is recorded and shown. A release whose image has
no linux/arm64 build is not proposed at all (nor tried on trial hosts): the
platforms are kept with the release and the gap table says why. At most `max_open`
proposals are open per lane, and a (lane, version) is proposed once: the
store remembers it, and a branch already on the remote is adopted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import httpx
import pygit2
import structlog
from pydantic import BaseModel, ConfigDict, Field

from reconciler.errors import InputError, LanesError, PermanentError, TransientError
from reconciler.policy import evaluate
from reconciler.source.gitread import open_repo
from reconciler.source.loadcommit import LoadedCommit, load_commit
from reconciler.spec.lane import Lane
from reconciler.spec.upstream import GitHubReleases, OCIRepository, UpstreamSource
from reconciler.upstream import gitbranch
from reconciler.upstream.ancestry import fix_ancestry
from reconciler.upstream.base import Clock, PollSettings, backoff_delay, read_credential
from reconciler.upstream.forge import ForgeSettings, open_pull
from reconciler.upstream.platforms import SPARK_PLATFORM, describe, release_platforms
from reconciler.upstream.poll import make_client
from reconciler.upstream.proposal_text import ProposalDraft, commit_message, pull_body, pull_title
from reconciler.upstream.registry import resolve_image
from reconciler.upstream.selection import image_reference, newest_qualifying, settle_open
from reconciler.upstream.store import ProposalRecord, ReleaseRecord, UpstreamStore
from reconciler.upstream.yamledit import bump_lane

log = structlog.get_logger(__name__)

Action = Literal["opened", "adopted", "exists", "limited", "none", "no-arm64", "failed"]
"""`no-arm64`: the newest qualifying release's image offers no linux/arm64 build, so it is not proposed."""


class ProposalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    remote: str | None = Field(default="origin", description="remote to fetch the base from and push branches to")
    base: str = Field(default="main", description="the tracked branch proposals start from and target")
    state_dir: str = "state"
    policies_dir: str = "policies"
    author_name: str = "lanes"
    author_email: str = "lanes@localhost"
    push_credential: str | None = Field(default=None, description="credential name holding user:token for https")
    push_attempts: int = Field(default=3, ge=1)
    forge: ForgeSettings | None = None
    poll: PollSettings = PollSettings()


@dataclass(frozen=True)
class ProposalOutcome:
    lane: str
    action: Action
    version: str | None = None
    branch: str | None = None
    commit: str | None = None
    image: str | None = None
    pr_url: str | None = None
    denied: bool = False
    denial: tuple[str, ...] = ()
    message: str = ""

    def to_json(self) -> dict[str, object]:
        return {**self.__dict__, "denial": list(self.denial)}


AcceptFn = Callable[[pygit2.Repository, str], tuple[bool, str | None, str]]
"""(repository, commit) -> (accepted, signer, reason): the signature check proposals start from."""
TrialFn = Callable[[Lane, str, str], Awaitable[str]]
"""(lane, proposal commit, proposal branch) -> markdown for the pull request: runs the candidate on spare hosts."""


@dataclass
class _Run:
    repo: pygit2.Repository
    remote: str | None
    creds: pygit2.UserPass | None
    base: pygit2.Commit
    loaded: LoadedCommit
    store: UpstreamStore
    settings: ProposalSettings
    client: httpx.AsyncClient
    clock: Clock
    trial: TrialFn | None = None

    def branch_exists(self, branch: str) -> bool:
        if self.remote is not None:
            return gitbranch.remote_branch(self.repo, self.remote, branch) is not None
        return f"refs/heads/{branch}" in self.repo.references


async def propose_all(
    repo: str | Path | pygit2.Repository,
    store: UpstreamStore,
    settings: ProposalSettings,
    *,
    client: httpx.AsyncClient | None = None,
    clock: Clock | None = None,
    trial: TrialFn | None = None,
    base: str | None = None,
    accept: AcceptFn | None = None,
) -> list[ProposalOutcome]:
    """One pass over every lane with `track:`; one lane's failure never stops another.

    `trial`, when given, runs each new candidate of a lane with `trial_hosts` before its pull request
    is opened, and what it returns goes into the request's body; only a proposal commit made here is
    tried, never one adopted from the remote. `base`, when given, is the commit proposals start from
    (the daemon's last verified and decided commit) instead of the fetched head of the tracked branch.
    `accept`, when given, judges the commit proposals would start from (a person's run with the daemon's
    settings, signing on): nothing is proposed from a commit it does not accept.
    """
    if client is None:
        async with make_client(settings.poll) as own:
            return await propose_all(
                repo, store, settings, client=own, clock=clock, trial=trial, base=base, accept=accept
            )
    repository = repo if isinstance(repo, pygit2.Repository) else open_repo(repo)
    push_secret = (
        read_credential(settings.poll.credentials_dir, settings.push_credential) if settings.push_credential else None
    )
    creds = gitbranch.credentials(push_secret)
    remote = settings.remote if settings.remote and settings.remote in repository.remotes.names() else None
    if remote is not None:
        await asyncio.to_thread(gitbranch.fetch, repository, remote, creds)
    start = _base_commit(repository, remote, settings.base) if base is None else _commit(repository, base)
    if accept is not None:
        ok, _, why = accept(repository, str(start.id))
        if not ok:
            raise InputError(f"not proposing from {str(start.id)[:12]}, a commit lanes would not act on: {why}")
    loaded = load_commit(repository, str(start.id), settings.state_dir, settings.policies_dir)
    run = _Run(repository, remote, creds, start, loaded, store, settings, client, clock or Clock(), trial)
    outcomes = []
    for _, lane in sorted(loaded.desired.lanes.items()):
        if lane.track is None:
            continue
        try:
            outcomes.append(await _propose_lane(run, lane))
        except LanesError as exc:
            log.warning("upstream.proposal_failed", lane=lane.name, error=str(exc))
            outcomes.append(ProposalOutcome(lane.name, "failed", message=str(exc)))
    return outcomes


def _commit(repo: pygit2.Repository, sha: str) -> pygit2.Commit:
    try:
        commit = repo[sha].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise InputError(f"the base commit {sha[:12]} is not in the state repository: {exc}") from None
    assert isinstance(commit, pygit2.Commit)
    return commit


def _base_commit(repo: pygit2.Repository, remote: str | None, base: str) -> pygit2.Commit:
    refs = ([f"refs/remotes/{remote}/{base}"] if remote else []) + [f"refs/heads/{base}"]
    for ref in refs:
        if ref in repo.references:
            commit = repo.references[ref].peel(pygit2.Commit)
            assert isinstance(commit, pygit2.Commit)
            return commit
    raise InputError(f"the tracked branch '{base}' is not in the state repository", field="--base")


async def _propose_lane(run: _Run, lane: Lane) -> ProposalOutcome:
    assert lane.track is not None
    sources = {s.name: s for s in run.loaded.desired.upstreams.sources}
    source = sources[lane.track.source]
    settle_open(run.store, lane, run.branch_exists)
    release = newest_qualifying(run.store, lane, run.loaded.desired.lane_file(lane.name))
    if release is None or release.version is None:
        return ProposalOutcome(lane.name, "none", message=f"no qualifying release newer than {lane.engine_version}")
    version = release.version
    branch = gitbranch.proposal_branch(lane.name, version)
    known = run.store.proposal(lane.name, version)
    if known is not None:
        return ProposalOutcome(
            lane.name,
            "exists",
            version,
            branch,
            known.commit,
            known.image,
            known.pr_url,
            known.denied,
            known.denial,
            f"already proposed ({known.state})",
        )
    theirs = gitbranch.remote_branch(run.repo, run.remote, branch) if run.remote else None
    if theirs is not None:
        return await _adopt(run, lane, source, release, branch, theirs)
    open_now = run.store.proposals(lane.name, "open")
    if len(open_now) >= lane.track.max_open:
        return ProposalOutcome(
            lane.name,
            "limited",
            version,
            branch,
            message=f"{len(open_now)} proposal(s) open, max_open is {lane.track.max_open}",
        )
    path = run.loaded.desired.lane_file(lane.name)
    ref = image_reference(lane.track.image, release, path)
    image = await resolve_image(ref, list(sources.values()), run.client, run.settings.poll, run.clock, run.store)
    # Before anything is committed or tried: an image a Spark cannot pull is never proposed (nor trialled).
    offered = await release_platforms(
        run.store, release, image, list(sources.values()), run.client, run.settings.poll, run.clock
    )
    if not offered.arm64:
        log.warning("upstream.no_arm64", lane=lane.name, version=version, image=image, platforms=offered.platforms)
        return ProposalOutcome(
            lane.name,
            "no-arm64",
            version,
            image=image,
            message=f"not proposed: {image} has no {SPARK_PLATFORM} image ({describe(offered.platforms)})",
        )
    blob = run.repo[run.base.tree[path].id]
    assert isinstance(blob, pygit2.Blob)
    edited = bump_lane(blob.data.decode(), image=image, engine_version=version, path=path)
    draft = _draft(run, lane, source, release, branch, path, image)
    author = gitbranch.signature(run.settings.author_name, run.settings.author_email)
    oid = gitbranch.commit_file(run.repo, run.base, path, edited.encode(), commit_message(draft), author)
    run.repo.references.create(f"refs/heads/{branch}", oid, force=True)
    action: Action = "opened"
    commit = str(oid)
    if run.remote is not None:
        commit, action = await _push(run, lane, source, release, branch)
    draft = replace(draft, commit=commit)
    # Only our own commit on the verified base is tried: one adopted after a lost push race is someone else's.
    if run.trial is not None and lane.track.trial_hosts and not draft.denial and commit == str(oid):
        draft = replace(draft, trial=await run.trial(lane, commit, branch))
    return await _open_and_record(run, lane, source, release, draft, action)


async def _push(
    run: _Run, lane: Lane, source: UpstreamSource, release: ReleaseRecord, branch: str
) -> tuple[str, Action]:
    """Push; on a rejection fetch, adopt the same proposal if the remote has it, else retry with backoff."""
    assert run.remote is not None
    last = ""
    for attempt in range(run.settings.push_attempts):
        reason = await asyncio.to_thread(gitbranch.push, run.repo, run.remote, branch, run.creds)
        if reason is None:
            return str(run.repo.references[f"refs/heads/{branch}"].target), "opened"
        last = reason
        log.warning("upstream.push_rejected", lane=lane.name, branch=branch, reason=reason, attempt=attempt + 1)
        await asyncio.to_thread(gitbranch.fetch, run.repo, run.remote, run.creds)
        theirs = gitbranch.remote_branch(run.repo, run.remote, branch)
        if theirs is not None:
            if not _same_proposal(theirs, lane, source, release):
                raise PermanentError(f"{branch} exists on '{run.remote}' with another commit; it is not overwritten")
            run.repo.references.create(f"refs/heads/{branch}", theirs.id, force=True)
            return str(theirs.id), "adopted"
        await run.clock.sleep(backoff_delay(attempt, run.settings.poll.retry_base_s, 60.0, run.clock.rng))
    raise TransientError(f"push of {branch} rejected {run.settings.push_attempts} time(s): {last}")


def _same_proposal(commit: pygit2.Commit, lane: Lane, source: UpstreamSource, release: ReleaseRecord) -> bool:
    found = gitbranch.trailers(commit.message)
    return found.get("Lane") == lane.name and found.get("Upstream") == f"{source.name} {release.tag}"


async def _adopt(
    run: _Run, lane: Lane, source: UpstreamSource, release: ReleaseRecord, branch: str, theirs: pygit2.Commit
) -> ProposalOutcome:
    """A proposal branch already on the remote (another proposer, a lost database): record it, never redo it."""
    if not _same_proposal(theirs, lane, source, release):
        raise PermanentError(f"{branch} exists on '{run.remote}' with another commit; it is not overwritten")
    image = gitbranch.trailers(theirs.message).get("Image", "")
    path = run.loaded.desired.lane_file(lane.name)
    draft = replace(_draft(run, lane, source, release, branch, path, image), commit=str(theirs.id))
    return await _open_and_record(run, lane, source, release, draft, "adopted")


def _draft(
    run: _Run, lane: Lane, source: UpstreamSource, release: ReleaseRecord, branch: str, path: str, image: str
) -> ProposalDraft:
    project = source.repo if isinstance(source, GitHubReleases) else None
    if isinstance(source, OCIRepository):
        project = f"{source.registry}/{source.repository}"
    assert release.version is not None
    return ProposalDraft(
        lane=lane.name,
        engine=lane.engine,
        lane_file=path,
        source=source.name,
        project=project,
        tag=release.tag,
        version=release.version,
        published=release.published,
        notes_url=release.notes_url,
        old_version=lane.engine_version,
        new_version=release.version,
        old_image=lane.image,
        new_image=image,
        branch=branch,
        base=run.settings.base,
    )


def _verdict(run: _Run, lane: Lane, commit: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(denials, this lane's warnings) of the policy evaluation on the proposed commit."""
    try:
        loaded = load_commit(run.repo, commit, run.settings.state_dir, run.settings.policies_dir)
    except InputError as exc:
        return (f"the proposed commit does not load: {exc.describe()}",), ()
    # Git builds against known issues with a fix commit: answered from the git-head mirrors the watch keeps.
    answers = fix_ancestry(loaded.desired, loaded.policies.known_issues, run.settings.poll.data_dir)
    verdict = evaluate(loaded.desired, loaded.policies, fix_ancestry=answers)
    deny = tuple(
        f"{v.rule}{f' ({v.lane})' if v.lane else ''}: {v.message}" for v in verdict.violations if v.severity == "deny"
    )
    warn = tuple(f"{v.rule}: {v.message}" for v in verdict.violations if v.severity == "warn" and v.lane == lane.name)
    return deny, warn


async def _open_and_record(
    run: _Run, lane: Lane, source: UpstreamSource, release: ReleaseRecord, draft: ProposalDraft, action: Action
) -> ProposalOutcome:
    denial, warnings = _verdict(run, lane, draft.commit)
    draft = replace(draft, denial=denial, warnings=warnings)
    pr_url = None
    forge = run.settings.forge
    if forge is not None and run.remote is not None:
        token = (
            read_credential(run.settings.poll.credentials_dir, forge.token_credential)
            if forge.token_credential
            else None
        )
        pr_url = await open_pull(
            run.client,
            forge,
            token,
            title=pull_title(draft),
            head=draft.branch,
            base=run.settings.base,
            body=pull_body(draft),
        )
    record = ProposalRecord(
        lane=lane.name,
        version=draft.version,
        branch=draft.branch,
        state="open",
        commit=draft.commit,
        image=draft.new_image,
        pr_url=pr_url,
        denied=bool(denial),
        denial=denial,
        created=run.clock.now(),
        upstream=f"{source.name} {release.tag}",
    )
    run.store.record_proposal(record)
    log.info(
        "upstream.proposed",
        lane=lane.name,
        version=draft.version,
        branch=draft.branch,
        commit=draft.commit[:12],
        denied=bool(denial),
        pr=pr_url,
        action=action,
    )
    return ProposalOutcome(
        lane.name, action, draft.version, draft.branch, draft.commit, draft.new_image, pr_url, bool(denial), denial
    )
