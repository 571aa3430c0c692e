"""A misspelled flag on a build lanes has no table for is refused by the image's own parser, over real ssh and
podman, before anything of the running spec stops (issue 25, "Must show", the rig's half).

The lane runs a vLLM nightly (`0.40.0.dev0+rig`): lanes' nearest table (0.33.0) only warns about it, so
`lanes check` passes the misspelling. The rig's engine image carries its own vLLM parser
(`tests/rig/image.py`, `reconciler/sim/standin_vllm.py`), the one its ranks start with. Before the preflight,
the apply stopped both ranks, started the new ones, each exited on "unrecognized arguments" and the lane
rolled back: spec A's containers were replaced.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from tests.rig.fleet import deployed, docker_changes, docker_mark, fleet_view, result_of, served_models
from tests.rig.lanescli import LaneRun
from tests.rig.rig import Rig

pytestmark = [pytest.mark.rig, pytest.mark.timeout(300)]

LANE = "nightly"
HOSTS = ("rig1", "rig2")
NAMES = {"rig1": f"{LANE}-r0", "rig2": f"{LANE}-r1"}
NIGHTLY = "0.40.0.dev0+rig"
IMAGE_ENV = {"STANDIN_VERSION": NIGHTLY, "STANDIN_PARSER": "vllm-0.33.0"}
"""A nightly build whose own parser is vLLM 0.33.0's (the simulator's `lab/vllm:main` is the same)."""
MISSPELLED = "--enable-prefix-cachng"
VLLM_SAYS = f"vllm: error: unrecognized arguments: {MISSPELLED}"


def _lane(rig: Rig, image: str, args: list[str]) -> dict[str, Any]:
    body = rig.lane(LANE, HOSTS, image_ref=image, args=args)
    return {**body, "engine": "vllm", "engine_version": NIGHTLY}


def _preflights(rig: Rig) -> list[dict[str, Any]]:
    with sqlite3.connect(rig.db) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("select outcome, message, host, lane from preflights order by rowid")]


def _runs(changes: dict[str, list[list[str]]]) -> dict[str, list[list[str]]]:
    return {host: [argv for argv in argvs if argv[0] == "run"] for host, argvs in changes.items()}


def _check_flags(rig: Rig) -> LaneRun:
    return rig.lanes("check", "--repo", str(rig.clone), "--db", str(rig.db), "--json")


def _remove_ours(rig: Rig) -> None:
    for host in HOSTS:
        for c in rig.containers(host):
            name = str(c.get("Name", "")).lstrip("/")
            if name.startswith((f"lanes-{LANE}-", "lanes-preflight-")):
                rig.docker(host, "rm", "-f", "-t", "0", name, check=False)


def test_a_misspelled_flag_is_refused_by_the_images_parser_and_spec_a_keeps_serving(rig: Rig) -> None:
    image = rig.engine_image("vllm-nightly", IMAGE_ENV)
    try:
        _check(rig, image)
    finally:
        _remove_ours(rig)


def _check(rig: Rig, image: str) -> None:
    rig.publish({LANE: _lane(rig, image, [])}, "nightly: spec A over rig1, rig2")
    deployed(rig)
    head = rig.hosts[HOSTS[0]].address
    assert served_models(head, 8000) == [f"{LANE}-model"]
    assert [(p["outcome"], p["host"]) for p in _preflights(rig)] == [("accepted", "rig1")], _preflights(rig)
    before = fleet_view(rig)
    spec_a = {h: (before[h][f"lanes-{NAMES[h]}"].id, before[h][f"lanes-{NAMES[h]}"].spec) for h in HOSTS}

    rig.publish({LANE: _lane(rig, image, [MISSPELLED])}, "nightly: a misspelled flag")
    check = _check_flags(rig)
    assert check.returncode == 0, check.describe()  # no table for the nightly: the flags rule only warns
    judged = check.json()["flags_judged"][LANE]
    assert judged == {"judged_by": "none", "preflight": True}, judged
    flags_rule = [v for v in check.json()["violations"] if v["rule"] == "engine-flags"]
    assert [(v["severity"], v["lane"]) for v in flags_rule] == [("warn", LANE)], check.describe()
    mark = docker_mark(rig)
    run = rig.apply()

    denied = result_of(run, LANE)
    assert denied["result"] == "denied" and VLLM_SAYS in denied["error"], run.describe()
    changes = docker_changes(rig, mark)
    # Only the parse ran, on the head rank's host, in a container of its own: nothing was stopped or started.
    (parse,) = _runs(changes)["rig1"]
    assert "--rm" in parse and MISSPELLED in parse and image in parse, parse
    assert all(argv[0] in ("pull", "run") for argv in changes["rig1"]), changes
    assert changes["rig2"] == [], changes
    after = fleet_view(rig)
    for h in HOSTS:
        c = after[h][f"lanes-{NAMES[h]}"]
        assert (c.id, c.spec, c.status) == (*spec_a[h], "running"), f"{h}: {c}\n{run.describe()}"
    assert {n for h in HOSTS for n in after[h]} == {f"lanes-{n}" for n in NAMES.values()}, "the parser left nothing"
    assert served_models(head, 8000) == [f"{LANE}-model"]
    refused = [p for p in _preflights(rig) if p["outcome"] == "refused"]
    assert refused == [{"outcome": "refused", "message": VLLM_SAYS, "host": "rig1", "lane": LANE}], _preflights(rig)
    check = _check_flags(rig)  # the kept verdict is lanes check's too
    assert check.returncode == 1, check.describe()
    judged = check.json()["flags_judged"][LANE]
    assert (judged["judged_by"], judged["outcome"], judged["message"]) == ("image", "refused", VLLM_SAYS), judged

    # The verdict is kept: the next cycle denies the lane from the journal and runs no parse.
    mark = docker_mark(rig)
    again = rig.apply()
    denied = result_of(again, LANE)
    assert denied["result"] == "denied" and VLLM_SAYS in denied["error"], again.describe()
    assert _runs(docker_changes(rig, mark)) == {h: [] for h in rig.hosts}, docker_changes(rig, mark)
    assert len(_preflights(rig)) == 2
    assert {h: fleet_view(rig)[h][f"lanes-{NAMES[h]}"].id for h in HOSTS} == {h: spec_a[h][0] for h in HOSTS}
