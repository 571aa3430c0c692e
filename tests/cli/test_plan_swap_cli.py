"""`lanes plan` shows a swap as one transaction: the lane that gives a host, the lane that takes it, and what
happens if the taking lane fails (text and --json); a lane's `after:` is shown too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.simfleet import SMALL, sim_fleet
from tests.support.sparks import loopback

pytestmark = pytest.mark.timeout(120)
TAKER = "qwen-c"


async def test_the_plan_of_a_commit_that_moves_a_host_shows_the_swap(tmp_path: Path) -> None:
    async with sim_fleet(tmp_path, loopback(63)) as fleet:
        args = fleet.connect()
        code, out, err = await fleet.lanes("apply", *args, "--yes", "--json")
        assert code == 0, out + err
        files = fleet.files(seqs=6)  # qwen-a changes too: the taker's `after: [qwen-a]` orders it after it
        small = files[f"state/lanes/{SMALL}.yaml"]
        files[f"state/lanes/{SMALL}.yaml"] = small + b"desired: stopped\n"
        taker = small.replace(f"served_model_name: {SMALL}".encode(), f"served_model_name: {TAKER}".encode())
        files[f"state/lanes/{TAKER}.yaml"] = (
            taker.replace(b"max_num_seqs: 8", b"max_num_seqs: 4") + b"after: [qwen-a]\n"
        )
        fleet.commit(files, "spark2 moves from qwen-b to qwen-c")
        code, out, err = await fleet.lanes("plan", *args)
        assert code == 0, out + err
        text = " ".join(out.split())  # wrapped lines joined
        assert (
            f"swap {SMALL} -> {TAKER} on spark2, one transaction: {TAKER}'s images are pulled before {SMALL} "
            f"stops; if {TAKER} fails its readiness gate, {SMALL} comes back on its last healthy spec"
        ) in text, out
        code, out, err = await fleet.lanes("plan", *args, "--json")
        assert code == 0, err
        data = json.loads(out)
        (swap,) = data["swaps"]
        assert (swap["giving"], swap["taking"], swap["hosts"]) == ([SMALL], [TAKER], ["spark2"])
        assert next(lane for lane in data["lanes"] if lane["name"] == TAKER)["after"] == ["qwen-a"]
        assert "after qwen-a (its after: in the lane file)" in text
