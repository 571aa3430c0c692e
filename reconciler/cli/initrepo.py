"""`lanes init DIR`: a state repository that `lanes check --repo DIR` passes at once.

Beside the scaffold (state/, policies/, a README) it writes what the scaffold's files point to and what
keeps the repository checked: the JSON Schemas their `$schema` lines name (`schemas/`), a CI workflow
running `lanes check` on every push and pull request, and a pre-commit hook that checks the commit about
to be made. Then it makes the first commit, since `lanes check` reads commits, never the working tree.
"""

from __future__ import annotations

import json
import shutil
import stat
from importlib import metadata, resources
from pathlib import Path

import pygit2

from reconciler.cli.schema import SCHEMAS, json_schema

WORKFLOW = ".github/workflows/lanes-check.yml"
"""One file for the three forges: GitHub Actions reads .github/workflows; Gitea Actions reads
.gitea/workflows and, when that folder is absent, .github/workflows (go-gitea/gitea
modules/actions/workflows.go, ListWorkflows); so does Forgejo Actions for .forgejo/workflows
(https://forgejo.org/docs/latest/user/actions/overview/: "in the absence of a .forgejo/workflows
directory, workflows will be looked up in the .github/workflows directory")."""

HOOKS_DIR = "hooks"


def _version() -> str:
    try:
        return metadata.version("spark-lanes")
    except metadata.PackageNotFoundError:
        return ""


def workflow() -> str:
    pin = f"=={_version()}" if _version() else ""
    return f"""# lanes check on every push and pull request: a commit the daemon would deny fails here first.
# Written by `lanes init`; GitHub Actions, Gitea Actions and Forgejo Actions run it alike.
name: lanes check
on: [push, pull_request]
jobs:
  check:
    # A label your runners have: GitHub's hosted and Gitea's act_runner default to ubuntu-latest,
    # Forgejo runners are often registered as docker.
    runs-on: ubuntu-latest
    env:
      # What pip installs for lanes: a version on your index, a wheel URL, or git+https://... of lanes.
      LANES: spark-lanes{pin}
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: python -m pip install "$LANES"
      - run: lanes check --repo . --rev HEAD
"""


PRE_COMMIT = """#!/bin/sh
# lanes: check the commit about to be made (the index, not the working tree), as CI and the daemon will.
# Installed by `lanes init` with `git config core.hooksPath hooks`; in a clone, run that command once.
if ! command -v lanes >/dev/null 2>&1; then
    echo "lanes is not on PATH here: this commit is not checked (the CI workflow checks it)" >&2
    exit 0
fi
tree=$(git write-tree) || exit 1
if parent=$(git rev-parse -q --verify HEAD); then
    candidate=$(git commit-tree "$tree" -p "$parent" -m "lanes pre-commit check") || exit 1
else
    candidate=$(git commit-tree "$tree" -m "lanes pre-commit check") || exit 1
fi
exec lanes check --repo . --rev "$candidate"
"""


def write_extras(directory: Path) -> list[Path]:
    """Schemas, workflows and the hook; the paths written, relative to `directory`."""
    written: list[Path] = []
    for kind in SCHEMAS:
        path = directory / "schemas" / f"{kind}.schema.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json_schema(kind), indent=2) + "\n")
        written.append(path)
    path = directory / WORKFLOW
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(workflow())
    written.append(path)
    hook = directory / HOOKS_DIR / "pre-commit"
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(PRE_COMMIT)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    written.append(hook)
    return [p.relative_to(directory) for p in written]


def _signature(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature  # the person's git identity, as `git commit` would use it
    except (KeyError, pygit2.GitError):
        return pygit2.Signature("lanes init", "lanes@localhost")


def init_repository(directory: Path) -> str:
    """Scaffold, extras, `core.hooksPath`, and the first commit on `main`; its id."""
    scaffold = resources.files("reconciler") / "scaffold"
    with resources.as_file(scaffold) as src:
        shutil.copytree(src, directory, dirs_exist_ok=True, symlinks=False)
    write_extras(directory)
    repo = pygit2.init_repository(str(directory), initial_head="main")
    repo.config["core.hooksPath"] = HOOKS_DIR
    repo.index.add_all()
    repo.index.write()
    who = _signature(repo)
    oid = repo.create_commit("HEAD", who, who, "lanes init: state, policies, schemas, CI", repo.index.write_tree(), [])
    return str(oid)
