"""A lane's JSON columns are decoded once per change of their text, not of their row, and their strings are shared
across lanes (issue 27: 250 lanes' healthy specs held 9.1 MB decoded, decoded again each cycle as each row was
written again)."""

from __future__ import annotations

from pathlib import Path

from reconciler.store.journal import Store
from reconciler.store.jsoncolumns import JsonColumns


def specs(lane: str, commit: str = "c1") -> list[dict[str, object]]:
    return [
        {
            "host": f"{lane}-h0",
            "spec": {
                "name": f"lanes-{lane}-r0",
                "image": "vllm@sha256:" + "a" * 64,
                "command": ["serve", "/models/m", "--tensor-parallel-size", "4"],
                "labels": [["lanes.commit", commit], ["lanes.lane", lane]],
            },
        }
    ]


def test_a_row_written_again_with_the_same_specs_keeps_their_decoded_value(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    store.update_lane("a", health="healthy", healthy_specs=specs("a"), timings={"total": 1.5})
    first = store.lane("a")
    assert first is not None
    store.update_lane("a", health="degraded", last_error="the engine does not answer")  # `updated` changes too
    again = store.lane("a")
    assert again is not None and again is not first and again.health == "degraded"
    assert again.healthy_specs is first.healthy_specs
    assert again.timings is first.timings
    store.update_lane("a", healthy_specs=specs("a", commit="c2"))
    changed = store.lane("a")
    assert changed is not None and changed.healthy_specs == specs("a", commit="c2")
    assert changed.healthy_specs is not first.healthy_specs
    assert first.healthy_specs == specs("a")  # a record read before is not changed by a later write


def test_lanes_share_their_equal_strings(tmp_path: Path) -> None:
    store = Store(tmp_path / "lanes.db")
    store.update_lane("a", healthy_specs=specs("a"))
    store.update_lane("b", healthy_specs=specs("b"))
    a, b = (r.healthy_specs[0]["spec"] for r in store.lanes())
    assert a == specs("a")[0]["spec"] and b == specs("b")[0]["spec"]
    assert a["image"] is b["image"]
    assert a["command"][2] is b["command"][2]
    assert next(iter(a)) is next(iter(b))  # keys too
    assert a["labels"][0] is b["labels"][0]  # ["lanes.commit", "c1"] in both
    assert a["labels"][1] == ["lanes.lane", "a"] and b["labels"][1] == ["lanes.lane", "b"]
    assert a["command"] is b["command"]  # a list of plain values, equal: one object


def test_equal_containers_are_one_object_and_true_is_not_one() -> None:
    columns = JsonColumns()
    a = columns.decode("a", "healthy_specs", '[{"env": [["K", "1"]], "m": {"ro": true}, "n": [1, 1.0]}]')
    b = columns.decode("b", "healthy_specs", '[{"env": [["K", "1"]], "m": {"ro": 1}, "n": [1, 1.0]}]')
    assert a[0]["env"][0] is b[0]["env"][0]
    assert a[0]["n"] is b[0]["n"]
    assert a[0]["m"] == {"ro": True} and a[0]["m"]["ro"] is True
    assert b[0]["m"]["ro"] == 1 and b[0]["m"]["ro"] is not True and type(b[0]["m"]["ro"]) is int


def test_the_shared_strings_stay_in_proportion_to_what_is_held() -> None:
    columns = JsonColumns()
    for n in range(2_000):  # a lane whose specs change 2,000 times, each with new strings
        value = columns.decode("a", "healthy_specs", f'[{{"commit": "c{n}", "image": "vllm"}}]')
        assert value == [{"commit": f"c{n}", "image": "vllm"}]
    columns.decode("b", "hosts", '["h0", "h1"]')
    assert columns.held() < 300
    columns.keep_only({"b"})
    assert columns.decode("b", "hosts", '["h0", "h1"]') == ["h0", "h1"]


def test_a_long_text_is_kept_by_its_key_not_itself() -> None:
    columns = JsonColumns()
    text = '[{"commit": "c1", "image": "' + "v" * 1000 + '"}]'
    first = columns.decode("a", "healthy_specs", text)
    assert columns.decode("a", "healthy_specs", "".join(list(text))) is first  # an equal text read again
    assert not any(isinstance(key, str) and len(key) > 256 for key, _ in columns._kept.values())
    other = columns.decode("a", "healthy_specs", text.replace("c1", "c2"))
    assert other is not first and other[0]["commit"] == "c2"
