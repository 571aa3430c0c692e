"""The lane-file edit: two lines change, every other byte stays, or the edit is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.errors import PermanentError
from reconciler.upstream.yamledit import bump_lane
from tests.support.example import ROOT

pytestmark = pytest.mark.timeout(30)

NEW_IMAGE = "lmsysorg/sglang@sha256:" + "c" * 64


@pytest.mark.parametrize("path", sorted((ROOT / "state" / "lanes").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_example_lane_file_changes_in_exactly_two_lines(path: Path) -> None:
    text = path.read_text()
    edited = bump_lane(text, image=NEW_IMAGE, engine_version="0.5.22", path=str(path))
    before, after = text.splitlines(), edited.splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 2
    assert changed[0][1].startswith("engine_version: 0.5.22") and changed[1][1] == f"image: {NEW_IMAGE}"
    assert edited.endswith("\n") and edited.count("#") == text.count("#")


def test_other_indentation_and_quotes_are_kept() -> None:
    text = (
        "# a lane indented by four\n"
        "engine: vllm\n"
        'engine_version: "0.26.1"   # quoted on purpose\n'
        "image: 'a/b@sha256:" + "b" * 64 + "'\n"
        "hosts:\n"
        "    - dgx1\n"
        "    - dgx2\n"
        "env:\n"
        '    A: "1"\n'
    )
    edited = bump_lane(text, image=NEW_IMAGE, engine_version="0.32", path="lane.yaml")
    assert edited.splitlines()[2] == 'engine_version: "0.32"     # quoted on purpose'
    assert edited.splitlines()[3] == f"image: '{NEW_IMAGE}'"
    assert edited.splitlines()[4:] == text.splitlines()[4:]


def test_a_version_that_yaml_would_read_as_a_number_stays_a_string() -> None:
    edited = bump_lane("engine_version: 0.26.1\nimage: a\n", image="b", engine_version="0.32", path="p")
    assert edited == "engine_version: '0.32'\nimage: b\n"


def test_a_file_that_cannot_round_trip_unchanged_is_refused() -> None:
    with pytest.raises(PermanentError, match="without reformatting"):
        bump_lane("engine_version:   1.0\nimage: a\n", image="b", engine_version="2.0", path="p")
    with pytest.raises(PermanentError, match="top-level image and engine_version"):
        bump_lane("image: a\n", image="b", engine_version="2.0", path="p")
