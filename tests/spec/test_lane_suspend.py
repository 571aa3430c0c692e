"""The lane file's `suspended` flag and `change_window` reference, and the JSON Schema `lanes schema` writes."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from reconciler.cli.schema import json_schema
from reconciler.spec.lane import Lane
from tests.support.example import PRODUCTION, example_state

pytestmark = pytest.mark.timeout(10)


def test_a_lane_is_managed_unless_its_file_says_suspended() -> None:
    data = example_state().lanes[PRODUCTION].model_dump()
    assert Lane.model_validate(data).suspended is False
    lane = Lane.model_validate({**data, "suspended": True, "change_window": "production-nights"})
    assert (lane.suspended, lane.change_window) == (True, "production-nights")
    with pytest.raises(ValidationError):
        Lane.model_validate({**data, "change_window": "Not A Name"})


def test_the_lane_schema_documents_both() -> None:
    schema = json.loads(json.dumps(json_schema("lane")))
    props = schema["properties"]
    assert props["suspended"]["type"] == "boolean" and props["suspended"]["default"] is False
    assert "no drift repair" in props["suspended"]["description"]
    assert "policies/windows.yaml" in props["change_window"]["description"]
    assert "suspended" not in schema.get("required", [])


def test_lanes_schema_writes_the_windows_file_kind_too() -> None:
    schema = json_schema("windows")
    window = schema["$defs"]["ChangeWindow"]
    assert {"cron", "timezone", "duration_minutes"} <= set(window["required"])
    assert "days by name" in window["properties"]["cron"]["description"]
