"""A rank removed by hand, put back at the next apply: `lanes status` and `lanes history` name what drifted.

The repair happens at a head that did not change the lane (the usual case: nobody committed, a container
went away), so `lanes history` attaches it to the newest change of the lane at or before that head, as it
attaches evidence. `lanes status` says what was repaired, also once a later error is shown beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.simfleet import QWEN, SMALL, WIDE_HOST, sim_fleet
from tests.support.sparks import loopback

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def row_of(table: str, lane: str) -> str:
    """The lane's row of a `lanes status` table, its wrapped lines joined (the other lanes' rows left out)."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(lane + " "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1].strip()), len(lines))
    return " ".join(" ".join(lines[start:end]).split())


async def test_a_removed_rank_repaired_is_named_in_status_and_history(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(66), wide=True) as fleet:
        args = fleet.connect()
        view = ["--repo", str(fleet.repo), "--db", str(fleet.db)]
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code == 0, (out, err)
        # A commit that changes only the other lane: the repair below happens at a head that did not touch QWEN.
        files = fleet.files()
        small = f"state/lanes/{SMALL}.yaml"
        files[small] = files[small].replace(b"max_num_seqs: 8", b"max_num_seqs: 4")
        head = fleet.commit(files, f"{SMALL}: fewer sequences")
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code == 0, (out, err)

        rank = f"lanes-{QWEN}-r1"
        status, _, rm_err = await fleet.env.fleet.runtime(WIDE_HOST).execute(["docker", "rm", "-f", rank])  # by hand
        assert status == 0, rm_err
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code == 0, (out, err)
        drifted = f"{rank} missing on {WIDE_HOST}"
        missing = {"kind": "missing", "host": WIDE_HOST, "container": rank, "detail": ""}

        code, out, err = await fleet.lanes("status", *view, columns=250)
        assert code == 0, err
        row = row_of(out, QWEN)
        assert "repaired: " in row and drifted in row.split("repaired: ", 1)[1], out
        code, out, err = await fleet.lanes("status", *view, "--json")
        assert code == 0, err
        [lane] = [r for r in json.loads(out)["lanes"] if r["name"] == QWEN]
        assert lane["health"] == "healthy" and missing in lane["drift"]["items"], lane

        # history: the repair is shown under the only change of QWEN (the first commit), at the head it ran at.
        code, out, err = await fleet.lanes("history", QWEN, *view, "--json")
        assert code == 0, err
        [first] = json.loads(out)["lanes"][QWEN]
        assert first["commit"] != head
        repairs = [a for a in first["applies"] if a["cause"] == "drift"]
        assert [(a["commit"], a["result"]) for a in repairs] == [(head, "applied")], first
        assert missing in repairs[0]["drift"], repairs
        code, out, err = await fleet.lanes("history", QWEN, *view, columns=250)
        assert code == 0, err
        assert f"applied at {head[:12]}" in out and "(drift: " in out and drifted in " ".join(out.split()), out

        # A later change of QWEN that is denied: status shows the denial and, beside it, the repair; history
        # keeps the repair under the change whose spec it put back, not under the newer one.
        files[f"state/lanes/{QWEN}.yaml"] = files[f"state/lanes/{QWEN}.yaml"].replace(
            b"image: vllm/vllm-openai@sha256:" + b"1" * 64, b"image: vllm/vllm-openai:latest"
        )
        denied = fleet.commit(files, f"{QWEN}: follow :latest")
        code, out, err = await fleet.lanes("apply", *args, "--yes")
        assert code != 0 and "denied" in out, (out, err)
        code, out, err = await fleet.lanes("status", *view, columns=250)
        row = row_of(out, QWEN)
        assert "denied" in row and "repaired: " in row and drifted in row.split("repaired: ", 1)[1], out
        code, out, err = await fleet.lanes("history", QWEN, *view, "--json")
        assert code == 0, err
        newest, oldest = json.loads(out)["lanes"][QWEN]
        assert newest["commit"] == denied and not [a for a in newest["applies"] if a["cause"] == "drift"], newest
        assert [a["commit"] for a in oldest["applies"] if a["cause"] == "drift"] == [head], oldest
