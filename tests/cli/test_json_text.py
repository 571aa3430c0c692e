"""`json_text`: the JSON of a command's answer indented two levels deep, each value below on one line."""

from __future__ import annotations

import json

from reconciler.cli.common import json_text


def test_the_value_is_the_same_json_with_one_finding_a_line() -> None:
    value = {
        "ok": False,
        "violations": [{"rule": "memory-budget", "detail": {"ranks": "0,1"}}, {"rule": "ports", "detail": {}}],
        "budgets": [],
        "flags_judged": {"lane-a": {"how": "parser", "flags": ["--tp", 4]}},
        "name": 'naïve "quoted"\nline',
    }
    text = json_text(value)
    assert json.loads(text) == value
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert '    {"rule": "memory-budget", "detail": {"ranks": "0,1"}},' in lines
    assert '  "budgets": [],' in lines
    assert '    "lane-a": {"how": "parser", "flags": ["--tp", 4]}' in lines
    assert all("\n" not in line for line in lines)


def test_plain_values_and_empty_containers_are_as_json_dumps_prints_them() -> None:
    values: list[object] = [None, 3, "x", [], {}, [1, [2, [3]]]]
    for value in values:
        assert json.loads(json_text(value)) == value
    assert json_text([1, [2, [3]]]) == "[\n  1,\n  [\n    2,\n    [3]\n  ]\n]"
