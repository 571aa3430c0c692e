"""secrets-by-name: credentials are refused without ever being echoed."""

from __future__ import annotations

import pytest

from reconciler.policy import Violation, evaluate
from reconciler.spec.load import DesiredState

from .builders import host, lane, model, only_rules, repo_policies, state

pytestmark = pytest.mark.timeout(30)

POLICIES = only_rules(repo_policies(), "secrets-by-name")
HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
GH = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def with_lane(**fields: object) -> DesiredState:
    return state([host("h0")], [model("m")], [lane("l", "m", ["h0"], **fields)])


def found(desired: DesiredState) -> list[Violation]:
    return [v for v in evaluate(desired, POLICIES).violations if v.rule == "secrets-by-name"]


@pytest.mark.parametrize(
    ("env", "secret"),
    [
        ({"HF_HUB_TOKEN_X": HF}, HF),
        ({"SOMETHING": GH}, GH),
        ({"OPENAI_KEY": "sk-" + "z" * 40}, "sk-" + "z" * 40),
        ({"AWS_ID": "AKIA" + "ABCDEFGHIJKLMNOP"}, "AKIA" + "ABCDEFGHIJKLMNOP"),
        ({"TLS": "-----BEGIN RSA PRIVATE KEY-----\nabc"}, "-----BEGIN RSA PRIVATE KEY-----\nabc"),
        ({"HF_TOKEN": "literal-value-here"}, "literal-value-here"),
        ({"DB_PASSWORD": "hunter2"}, "hunter2"),
        ({"MY_API_KEY": "abcdef0123456789abcdef"}, "abcdef0123456789abcdef"),
    ],
)
def test_credentials_in_env_are_denied_and_not_echoed(env: dict[str, str], secret: str) -> None:
    [v] = found(with_lane(env=env))
    assert v.severity == "deny"
    assert secret not in v.message
    assert secret not in str(v.to_json())
    assert "secrets:" in v.message
    assert next(iter(env)) in v.message


@pytest.mark.parametrize(
    "env",
    [
        {"TOKENIZERS_PARALLELISM": "false"},
        {"HF_TOKEN_PATH": "/run/secrets/hf"},
        {"HF_TOKEN": "${HF_TOKEN}"},
        {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"},
        {"NCCL_SOCKET_IFNAME": "enp1s0f0np0"},
    ],
)
def test_ordinary_env_passes(env: dict[str, str]) -> None:
    assert found(with_lane(env=env)) == []


def test_credential_arguments_are_denied() -> None:
    [flag] = found(with_lane(args=("--api-key", "s3cr3t-value")))
    assert "args[1] (after --api-key)" in flag.message
    assert "s3cr3t-value" not in flag.message
    [inline] = found(with_lane(args=("--hf-token=" + HF,)))
    assert HF not in inline.message
    [pattern] = found(with_lane(args=("--foo", GH)))
    assert "args[1]" in pattern.message


def test_secret_reference_by_name_passes() -> None:
    from reconciler.spec.lane import SecretRef

    assert found(with_lane(secrets=(SecretRef(name="hf-token", env="HF_TOKEN"),))) == []


def test_stopped_lane_is_still_denied() -> None:
    [v] = found(with_lane(env={"HF_TOKEN": HF}, desired="stopped"))
    assert v.severity == "deny"
