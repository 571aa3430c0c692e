"""The history walk stops when its reader says so (the dashboard's request over), and is bounded in depth."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.source.history import WalkStoppedError, lane_history
from tests.support.example import PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo

pytestmark = pytest.mark.timeout(30)


def test_a_stopped_walk_raises_at_the_next_commit_and_max_commits_bounds_it(tmp_path: Path) -> None:
    repo = StateRepo(tmp_path / "repo")
    files = fast_files()
    lane = f"state/lanes/{PRODUCTION}.yaml"
    shas = [repo.commit({**files, lane: files[lane] + f"# {n}\n".encode()}, f"c{n}") for n in range(5)]
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # the request ends while the third commit is due

    with pytest.raises(WalkStoppedError, match="after 2 commits"):
        lane_history(repo.repo, PRODUCTION, stop=stop)
    walked = lane_history(repo.repo, PRODUCTION, max_commits=2)
    assert [c.commit for c in walked] == shas[::-1][:2]
