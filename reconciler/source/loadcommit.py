"""Load the desired state and policies of one commit of a state repo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pygit2

from reconciler.source.gitread import open_repo, read_commit
from reconciler.spec.load import DesiredState, PolicySet, load_desired, load_policies


@dataclass(frozen=True)
class LoadedCommit:
    commit: str
    desired: DesiredState
    policies: PolicySet
    message: str = ""
    """The commit's message (its trailers can ask for an override, e.g. `Lanes-Change-Window: now`)."""


def load_commit(
    repo: str | Path | pygit2.Repository, rev: str = "HEAD", state_dir: str = "state", policies_dir: str = "policies"
) -> LoadedCommit:
    repository = repo if isinstance(repo, pygit2.Repository) else open_repo(repo)
    read = read_commit(repository, rev, (state_dir, policies_dir))
    desired = load_desired(read.files, read.commit, state_dir=state_dir)
    policies = load_policies(read.files, policies_dir=policies_dir)
    return LoadedCommit(read.commit, desired, policies, read.message)
