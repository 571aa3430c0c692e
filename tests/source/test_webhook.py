"""Webhook signatures and push payloads, from recorded-shape GitHub, Gitea and Forgejo deliveries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from reconciler.errors import InputError
from reconciler.source.webhook import PushEvent, parse_push, sign, verify_signature

CASES = Path(__file__).parent / "cases"
SECRET = b"s3cret-hook-key"


def delivery(name: str, secret: bytes = SECRET) -> tuple[dict[str, str], bytes]:
    """Headers and raw body as the forge would send them, signed the way that forge signs."""
    case: dict[str, Any] = json.loads((CASES / f"{name}.json").read_text())
    body = json.dumps(case["payload"], indent=2).encode()
    headers = dict(case["headers"])
    for header in case["signature_headers"]:
        value = sign(body, secret)
        headers[header] = f"sha256={value}" if header == "X-Hub-Signature-256" else value
    return headers, body


@pytest.mark.parametrize("name", ["github_push", "gitea_push", "forgejo_push", "github_ping"])
def test_a_good_signature_verifies(name: str) -> None:
    headers, body = delivery(name)
    assert verify_signature(headers, body, SECRET)
    # Header names are case-insensitive on the wire.
    assert verify_signature({k.lower(): v for k, v in headers.items()}, body, SECRET)


@pytest.mark.parametrize("name", ["github_push", "gitea_push", "forgejo_push"])
def test_a_bad_signature_or_body_or_secret_is_refused(name: str) -> None:
    headers, body = delivery(name)
    assert not verify_signature(headers, body + b" ", SECRET)
    assert not verify_signature(headers, body, b"another-secret")
    assert not verify_signature(headers, body, b"")
    wrong, _ = delivery(name, secret=b"attacker")
    assert not verify_signature(wrong, body, SECRET)


def test_no_signature_header_is_refused() -> None:
    headers, body = delivery("github_push")
    del headers["X-Hub-Signature-256"]
    assert not verify_signature(headers, body, SECRET)


def test_github_needs_the_sha256_prefix() -> None:
    headers, body = delivery("github_push")
    headers["X-Hub-Signature-256"] = headers["X-Hub-Signature-256"].removeprefix("sha256=")
    assert not verify_signature(headers, body, SECRET)
    headers["X-Hub-Signature-256"] = "sha1=" + sign(body, SECRET)
    assert not verify_signature(headers, body, SECRET)


def test_a_bad_header_is_not_rescued_by_a_good_one_next_to_it() -> None:
    headers, body = delivery("forgejo_push")
    headers["X-Gitea-Signature"] = "0" * 64
    assert not verify_signature(headers, body, SECRET)


def test_github_push_is_parsed() -> None:
    headers, body = delivery("github_push")
    event = parse_push(headers, body)
    assert event == PushEvent(
        ref="refs/heads/main",
        after="59b20b8d5c6ff8d09518454d4dd8b7b30f095ab5",
        repo_url="https://github.com/lab/spark-fleet.git",
        pusher="alice-op",
        before="6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        forge="github",
        delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958",
    )
    assert event.branch == "main" and not event.deleted


def test_gitea_push_is_parsed_as_gitea_even_with_github_headers() -> None:
    headers, body = delivery("gitea_push")
    event = parse_push(headers, body)
    assert event is not None
    assert event.forge == "gitea" and event.pusher == "bob"
    assert event.after == "bffeb74224043ba2feb48d137756c8a9331c449a"
    assert event.repo_url == "https://git.lab.internal/fleet/state.git"


def test_forgejo_push_is_parsed_as_forgejo() -> None:
    headers, body = delivery("forgejo_push")
    event = parse_push(headers, body)
    assert event is not None
    assert (event.forge, event.pusher, event.branch) == ("forgejo", "carol", "main")
    assert event.before == "0" * 40


def test_other_events_are_ignored() -> None:
    headers, body = delivery("github_ping")
    assert parse_push(headers, body) is None
    assert parse_push({"Content-Type": "application/json"}, b"{}") is None
    headers, body = delivery("gitea_push")
    headers = {k: ("pull_request" if k.endswith("-Event") else v) for k, v in headers.items()}
    assert parse_push(headers, body) is None


def test_github_form_encoded_payloads_are_read() -> None:
    case = json.loads((CASES / "github_push.json").read_text())
    body = urlencode({"payload": json.dumps(case["payload"])}).encode()
    headers = {**case["headers"], "Content-Type": "application/x-www-form-urlencoded"}
    event = parse_push(headers, body)
    assert event is not None and event.after.startswith("59b20b8d")


def test_a_deleted_branch_and_tags() -> None:
    headers = {"X-GitHub-Event": "push"}
    body = json.dumps({"ref": "refs/tags/v1", "before": "a" * 40, "after": "0" * 40}).encode()
    event = parse_push(headers, body)
    assert event is not None and event.deleted and event.branch is None
    assert event.repo_url == "" and event.pusher == ""


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"ref": "refs/heads/main"}', b"\xff\xfe"])
def test_a_malformed_push_is_an_input_error(body: bytes) -> None:
    with pytest.raises(InputError):
        parse_push({"X-GitHub-Event": "push"}, body)
