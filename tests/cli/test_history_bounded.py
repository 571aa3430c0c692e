"""`lanes history` parses every lane file of every commit it walks with the state loader's caps (issue 24).

Any pushed commit is walked, a refused one too: an alias bomb of a few hundred bytes used to expand
(nine aliases per level, six levels: 531,441 nodes) into the command's memory and output. Now the file
is listed as unreadable, with the loader's reason, and the walk goes on to the commits before it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import PRODUCTION, fast_files
from tests.support.gitrepo import StateRepo

pytestmark = pytest.mark.timeout(60)


def test_an_alias_bomb_in_a_lane_file_is_listed_unreadable_not_expanded(tmp_path: Path) -> None:
    repo = StateRepo(tmp_path / "repo")
    files = fast_files()
    first = repo.commit(files, "fleet")
    lines = ["bomb0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"bomb{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, 6)]
    lane = f"state/lanes/{PRODUCTION}.yaml"
    bomb = repo.commit({**files, lane: files[lane] + ("\n".join(lines) + "\n").encode()}, "bomb")
    run = CliRunner().invoke(app, ["history", PRODUCTION, "--repo", str(tmp_path / "repo"), "--json"])
    assert run.exit_code == 0, run.output[:2000]
    assert len(run.stdout) < 200_000  # the expanded tree is 531,441 strings
    entries = {e["commit"]: e for e in json.loads(run.stdout)["lanes"][PRODUCTION]}
    [unreadable] = entries[bomb]["files"]
    assert "more than 200000 nodes" in str(unreadable["error"]) and unreadable["fields"] == []
    assert first in entries
