"""Tables read in a pipe, at 80 columns and at 200, and in a real terminal: no name or number is ever cut.

`lanes status` is compared with golden outputs (tests/cli/golden/, read line by line when they were
written): one line per lane in a pipe, the lane as a heading and the error below the row at 80, the
error wrapped in its column at 200; a real pseudo-terminal (`script`) of 80 columns prints the same
text as COLUMNS=80 (colours aside). `lanes check` and `lanes history` are checked figure by figure
against their own --json, and the demo's paste-ready commands against an 80-column console.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from reconciler.cli.demo import print_paste_hint
from reconciler.store.journal import Store
from tests.support.example import EUGR, GLM, MINIMAX, PRODUCTION, ROOT

pytestmark = pytest.mark.timeout(60)
GOLDEN = Path(__file__).parent / "golden"
BOX = set("│┃┏┓┗┛━─╭╮╰╯┡┩")
DENY = (
    "denied by policy: memory-budget: rank 0 on dgx5 needs 101.2 GiB (weights 62.1 + KV 34.1 + overhead 5.0) "
    "but the budget at gpu_memory_utilization 0.85 is 96.3 GiB; lower max_model_len or gpu_memory_utilization"
)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def lanes(*args: str, columns: int | None = None) -> tuple[int, str, str]:
    """The real command in a pipe; $COLUMNS only when given."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli.main", *args], capture_output=True, text=True, env=env, timeout=50,
        check=False, cwd=ROOT,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """A journal with a healthy lane, a lane denied with a long reason, a stopped lane (the golden outputs' input)."""
    db = tmp_path / "lanes.db"
    store = Store(db)
    store.update_lane(
        PRODUCTION, desired="running", health="healthy", applied_commit="0123456789abcdef0123456789abcdef01234567",
        hosts=["dgx1", "dgx2", "dgx3", "dgx4"], timings={"to_token": 812.4},
        evidence={"pp": "pp 4123.5", "tg": "tg 41.2"},
    )  # fmt: skip
    store.update_lane(EUGR, desired="running", health="denied", hosts=["dgx5", "dgx6", "dgx7"], last_error=DENY)
    store.update_lane(GLM, desired="stopped", health="stopped", hosts=[])
    store.close()
    return db


def _status(db: Path, columns: int | None) -> str:
    code, out, err = lanes("status", "--db", str(db), "--repo", str(db.parent / "no-repo"), columns=columns)
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    ("columns", "golden"), [(None, "status-pipe.txt"), (80, "status-80.txt"), (200, "status-200.txt")]
)
def test_status_matches_its_golden_output(journal: Path, columns: int | None, golden: str) -> None:
    out = _status(journal, columns)
    assert out == (GOLDEN / golden).read_text(), out
    assert not BOX & set(out)
    if columns is not None:
        assert max(len(line) for line in out.splitlines()) <= columns
    else:  # a pipe: one line per lane, the whole reason on it
        rows = out.splitlines()[2:]
        assert len(rows) == 3 and rows[1].startswith(EUGR) and rows[1].endswith(DENY)
    for name in (PRODUCTION, EUGR, GLM):  # every name whole on one line
        assert any(name in line for line in out.splitlines())


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a pseudo-terminal")
def test_an_80_column_terminal_prints_what_columns_80_does(journal: Path) -> None:
    argv = [sys.executable, "-m", "reconciler.cli.main", "status", "--db", str(journal)]
    command = shlex.join([*argv, "--repo", str(journal.parent / "x")])
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        ["script", "-qec", f"stty cols 80 rows 40; {command}", "/dev/null"],
        capture_output=True, text=True, env=env, timeout=50, check=False, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = ANSI.sub("", proc.stdout).replace("\r\n", "\n")
    assert "\x1b[" in proc.stdout  # a terminal: the health is coloured
    assert seen == (GOLDEN / "status-80.txt").read_text(), seen


@pytest.mark.parametrize("columns", [None, 80, 200])
def test_check_prints_every_budget_figure_whole(columns: int | None) -> None:
    code, out, err = lanes("check", "--repo", str(ROOT), "--json")
    assert code == 0, err
    raw = json.loads(out)["budgets"]
    # A list of ranks, or per lane {"ranks": [...]}: the figures are the same either way.
    budgets = [r for lane in raw.values() for r in lane["ranks"]] if isinstance(raw, dict) else raw
    code, text, err = lanes("check", "--repo", str(ROOT), columns=columns)
    assert code == 0, err
    assert not BOX & set(text) and "…" not in text
    lines = text.splitlines()
    for name in (PRODUCTION, EUGR, GLM, MINIMAX):
        assert any(line.split() and line.split()[0] == name for line in lines), name
    gib = 1 << 30
    for b in budgets:
        # The row of this rank: rank, host, then the figures (GiB, one decimal), each whole.
        figures = [f"{b[k] / gib:.1f}" for k in ("weights", "overhead", "need", "budget", "headroom")]
        row_start = rf"\s*({re.escape(b['lane'])}\s+)?{b['rank']}\s+{b['host']}\s"
        rows = [line.split() for line in lines if re.match(row_start, line)]
        assert any(all(f in row for f in figures) for row in rows), (b, rows)
    if columns == 80:
        assert max(len(line) for line in lines) <= 80


def test_history_names_every_lane_whole_at_80_columns(tmp_path: Path) -> None:
    code, out, err = lanes("history", "--repo", str(ROOT), "--limit", "3", columns=80)
    assert code == 0, err
    assert not BOX & set(out)
    titles = [line for line in out.splitlines() if line in (PRODUCTION, EUGR, GLM, MINIMAX)]
    assert sorted(titles) == sorted((PRODUCTION, EUGR, GLM, MINIMAX))


def test_the_demos_paste_ready_commands_stay_on_one_line_at_80_columns(tmp_path: Path) -> None:
    buf = io.StringIO()
    clone = tmp_path / "a-rather-long-temporary-folder-name" / "state-repo"
    print_paste_hint(Console(file=buf, width=80), clone, 54321)
    lines = buf.getvalue().splitlines()
    sed = f"  sed -i 's/max_num_seqs: 8/max_num_seqs: 4/' {clone}/state/lanes/eugr-nightly-dsv41-3x.yaml"
    assert sed in lines and f"  git -C {clone} commit -am 'eugr: 4 sequences'" in lines
    assert "then: lanes status --daemon http://127.0.0.1:54321" in lines
    assert "or open the dashboard: http://127.0.0.1:54321/" in lines


def test_status_without_a_journal_says_never_applied_as_its_json_does(tmp_path: Path) -> None:
    """The text shows the JSON's health word and, beside it, that the journal never saw the lane applied."""
    code, out, err = lanes("status", "--db", str(tmp_path / "lanes.db"), "--repo", str(ROOT), columns=200)
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    code, data, err = lanes("status", "--json", "--db", str(tmp_path / "lanes.db"), "--repo", str(ROOT))
    lanes_json = {r["name"]: r for r in json.loads(data)["lanes"]}
    for name in (PRODUCTION, EUGR):  # running in the example state, never applied here
        assert lanes_json[name]["health"] == "progressing" and lanes_json[name]["never_applied"] is True
        assert "progressing (never applied)" in rows[name]
    assert " stopped " in rows[GLM]
