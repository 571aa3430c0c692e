"""`lanes plan`, `lanes apply` and `lanes apply --now` with a change window, against simulated Sparks.

Outside the window a change that restarts the running lane is planned as held until the window opens
(exit 4, like every lane that cannot be reconciled now), `apply` leaves the rank running and records
until when; `apply --now` is a person's override and restarts it at once. The window clock is the
test's (`LANES_TEST_CLOCK_FILE`): Tuesday 1 Dec 2026, noon UTC.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.execute.cycle import CLOCK_FILE_ENV
from tests.support.simfleet import QWEN, SimFleet, sim_fleet
from tests.support.sparks import loopback

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

# 21:00 UTC on weekdays for an hour; at Tuesday noon it next opens at 21:00 UTC the same day.
WINDOWS = (
    f"windows:\n  evenings:\n    cron: '0 21 * * mon-fri'\n    timezone: UTC\n    duration_minutes: 60\n"
    f"    lanes: [{QWEN}]\n"
)


def write_clock(path: Path) -> None:
    path.write_text(f"{datetime(2026, 12, 1, 12, 0, tzinfo=UTC).timestamp()}\n")


def qwen_id(fleet: SimFleet) -> str:
    [box] = [c for name, c in fleet.env.fleet.runtime("spark1").containers.items() if name.startswith(f"lanes-{QWEN}")]
    return box.id


async def test_outside_its_window_a_change_waits_and_apply_now_makes_it_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = tmp_path / "clock"
    write_clock(clock)
    monkeypatch.setenv(CLOCK_FILE_ENV, str(clock))
    async with sim_fleet(tmp_path, loopback(63)) as fleet:
        args = fleet.connect()
        files = {**fleet.files(), "policies/windows.yaml": WINDOWS.encode()}
        fleet.commit(files, "qwen-a under a window")
        code, out, err = await fleet.lanes("apply", *args, "--yes", "--lane", QWEN)
        assert code == 0, out + err  # a first start never waits
        first = qwen_id(fleet)

        fleet.commit({**fleet.files(seqs=6), "policies/windows.yaml": WINDOWS.encode()}, "qwen-a: 6 sequences")
        code, out, err = await fleet.lanes("plan", *args, "--lane", QWEN)
        assert code == 4, out + err
        assert "held until 2026-12-01T21:00:00Z" in " ".join(out.split())
        code, out, err = await fleet.lanes("apply", *args, "--yes", "--json", "--lane", QWEN)
        assert code == 4, out + err
        assert qwen_id(fleet) == first  # nothing restarted
        [row] = [r for r in json.loads(out)["lanes"] if r["name"] == QWEN]
        assert row["held_until"] == "2026-12-01T21:00:00Z"

        code, out, err = await fleet.lanes("apply", *args, "--yes", "--now", "--json", "--lane", QWEN)
        assert code == 0, out + err
        assert qwen_id(fleet) != first
        [row] = [r for r in json.loads(out)["lanes"] if r["name"] == QWEN]
        assert (row["health"], row["held_until"]) == ("healthy", None)
