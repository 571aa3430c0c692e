"""The `gateway:` section of state/fleet.yaml: defaults, and errors that name the file, line and field."""

from __future__ import annotations

import pytest

from reconciler.errors import InputError
from reconciler.spec.load import load_desired
from tests.support.example import EUGR, PRODUCTION, repo_files

pytestmark = pytest.mark.timeout(30)

COMMIT = "c0ffee0000000000000000000000000000000001"


def with_gateway(section: str) -> dict[str, bytes]:
    files = repo_files()
    fleet = files["state/fleet.yaml"].decode()
    head, _, _ = fleet.partition("\ngateway:")  # the example's own section, if it has one, is replaced
    files["state/fleet.yaml"] = (head.rstrip("\n") + "\n" + section).encode()
    return files


def test_the_example_state_routes_its_lanes_through_a_loopback_gateway() -> None:
    gateway = load_desired(repo_files(), COMMIT).fleet.gateway
    assert gateway is not None
    assert gateway.host == "127.0.0.1"
    assert gateway.models["deepseek-v4.1-flash"] == (PRODUCTION,)


def test_defaults_are_loopback_and_smgs_ports() -> None:
    gateway = load_desired(with_gateway("gateway:\n  models: {}\n"), COMMIT).fleet.gateway
    assert gateway is not None
    assert (gateway.host, gateway.port, gateway.metrics_port, gateway.models) == ("127.0.0.1", 30000, 29000, {})


@pytest.mark.parametrize(
    ("section", "field", "line_has", "words"),
    [
        (
            "gateway:\n  models:\n    deepseek-v4.1-flash: [nope]\n",
            "gateway.models.deepseek-v4.1-flash[0]",
            "[nope]",
            "not defined",
        ),
        (
            f"gateway:\n  models:\n    glm-5.3: [{PRODUCTION}]\n",
            "gateway.models.glm-5.3[0]",
            "glm-5.3:",
            "serves 'deepseek",
        ),
        ("gateway:\n  host: gw.example\n", "gateway.host", "host:", "not an IP address"),
        ("gateway:\n  port: 0\n", "gateway.port", "port:", None),
        (
            f"gateway:\n  models:\n    deepseek-v4.1-flash: [{PRODUCTION}, {PRODUCTION}]\n",
            "gateway.models",
            "models:",
            "twice",
        ),
        ("gateway:\n  models:\n    deepseek-v4-flash: []\n", "gateway.models", "models:", "no lane"),
        ("gateway:\n  listen: 0.0.0.0\n", "gateway.listen", "listen:", None),
        (
            f"gateway:\n  models:\n    deepseek-v4.1-flash: [{PRODUCTION}]\n  lanes:\n    typo-lane: {{watch_s: 5}}\n",
            "gateway.lanes.typo-lane",
            "typo-lane:",
            "not a lane of gateway.models",
        ),
        ("gateway:\n  analysis:\n    max_error_rate: 2\n", "gateway.analysis.max_error_rate", "max_error_rate:", None),
        ("gateway:\n  analysis:\n    watch: 5\n", "gateway.analysis.watch", "watch:", None),
    ],
    ids=[
        "unknown-lane",
        "other-served-name",
        "host-name",
        "port",
        "lane-twice",
        "no-lane",
        "unknown-key",
        "thresholds-for-an-unrouted-lane",
        "error-rate-over-one",
        "unknown-threshold",
    ],
)
def test_errors_name_the_file_line_and_field(section: str, field: str, line_has: str, words: str | None) -> None:
    files = with_gateway(section)
    with pytest.raises(InputError) as caught:
        load_desired(files, COMMIT)
    err = caught.value
    assert (err.file, err.field) == ("state/fleet.yaml", field)
    assert err.line is not None
    assert line_has in files["state/fleet.yaml"].decode().splitlines()[err.line - 1]
    if words:
        assert words in str(err)


def test_replicas_of_one_model_may_be_listed() -> None:
    # The eugr lane serves deepseek-v4-flash: one lane here, a list so replicas can join it.
    gateway = load_desired(
        with_gateway(f"gateway:\n  models:\n    deepseek-v4-flash: [{EUGR}]\n"), COMMIT
    ).fleet.gateway
    assert gateway is not None and gateway.model_of(EUGR) == "deepseek-v4-flash"
