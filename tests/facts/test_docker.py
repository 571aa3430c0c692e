"""The docker commands lanes sends and their parsers, against real outputs of docker and podman.

The recorded cases (`cases/docker_*.json`, `cases/podman_*.json`) are checked
field by field in `test_facts_cases.py`; here they also go through the two
other readers of the same output: the probe program, which maps `docker
inspect` on the host, and the executor's host operations, which send the
commands and decide what their output means.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import PermanentError
from reconciler.execute.hostops import HostOps
from reconciler.facts import docker
from reconciler.facts.commands import probe_argv
from reconciler.facts.parse import parse_probe
from reconciler.transport.base import CommandResult, HostTarget, Session, checked

from .test_host_scripts import _fake_docker, _run, host_fact_errors

pytestmark = pytest.mark.timeout(60)

CASES = Path(__file__).parent / "cases"


def _readable_inspects() -> list[Path]:
    """The recorded `docker inspect` outputs that parse (not the host without docker)."""
    found = []
    for path in sorted(CASES.glob("*.json")):
        case = json.loads(path.read_text())
        if case["kind"] == "docker-inspect" and "raises" not in case:
            found.append(path)
    return found


INSPECT_CASES = _readable_inspects()
REPO = "127.0.0.1:5077/lanes/standin"
PULLED = REPO + "@sha256:4a12139d929054fa19dd677d096ed603d2eda236b6701bc90bed12ae69e61ea5"


def _case(name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CASES / name).read_text())
    return case


def test_commands_are_argv_lists() -> None:
    assert docker.pull_argv(PULLED) == ["docker", "pull", PULLED]
    assert docker.image_inspect_argv(PULLED) == ["docker", "image", "inspect", PULLED]
    assert docker.inspect_argv("lanes-a-r0") == ["docker", "inspect", "lanes-a-r0"]
    assert docker.stop_argv("lanes-a-r0", 30) == ["docker", "stop", "-t", "30", "lanes-a-r0"]
    assert docker.rm_argv("lanes-a-r0") == ["docker", "rm", "-f", "lanes-a-r0"]
    assert docker.logs_argv("lanes-a-r0", 200) == ["docker", "logs", "--tail", "200", "lanes-a-r0"]


def test_pinned_digest() -> None:
    assert docker.pinned_digest(PULLED) == PULLED.rsplit("@", 1)[1]
    assert docker.pinned_digest("127.0.0.1:5077/lanes/standin:v1") is None


@pytest.mark.parametrize("tool", ["docker", "podman"])
def test_a_pull_of_another_digest_is_not_the_pinned_one(tool: str) -> None:
    images = docker.parse_image_inspect(_case(f"{tool}_image_inspect_pinned.json")["stdout"])
    assert docker.has_digest(images, PULLED.rsplit("@", 1)[1])
    assert not docker.has_digest(images, "sha256:" + "0" * 64)
    assert docker.repo_digests(images) == [PULLED]


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("", "docker inspect printed no JSON: ''"),
        ("Error: No such object: x\n", "docker inspect printed no JSON"),
        ('{"Id": "x"}', "docker inspect printed a JSON dict, not a list"),
        ("[3]", "a container is not a JSON object"),
        ('[{"Name": "/a"}]', "State is not a JSON object"),
        ('[{"Name": "/a", "State": {}}]', "container '/a' has no State.Status"),
        ('[{"State": {"Status": "exited", "ExitCode": "1"}}]', "State.ExitCode is not an integer: '1'"),
        ('[{"State": {"Status": "running"}, "Config": {"Labels": ["a=b"]}}]', "Config.Labels is not a JSON object"),
    ],
)
def test_inspect_output_that_is_not_dockers(stdout: str, message: str) -> None:
    with pytest.raises(docker.DockerOutputError) as info:
        docker.parse_inspect(stdout)
    assert message in str(info.value)


def test_one_name_describing_two_objects_is_refused() -> None:
    one = json.loads(_case("docker_inspect_running.json")["stdout"])
    with pytest.raises(docker.DockerOutputError, match="described 2 objects"):
        docker.container_state(json.dumps(one * 2))


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("null", "docker image inspect printed a JSON NoneType, not a list"),
        ('[{"Id": "sha256:1", "RepoDigests": "repo@sha256:1"}]', "RepoDigests is not a list of strings"),
    ],
)
def test_image_inspect_output_that_is_not_dockers(stdout: str, message: str) -> None:
    with pytest.raises(docker.DockerOutputError, match=message):
        docker.parse_image_inspect(stdout)


def test_null_repo_lists_read_as_empty() -> None:
    [image] = docker.parse_image_inspect('[{"Id": "sha256:1", "RepoTags": null, "RepoDigests": null}]')
    assert (image.repo_tags, image.repo_digests) == ((), ())


@pytest.mark.parametrize("path", INSPECT_CASES, ids=[p.stem for p in INSPECT_CASES])
def test_the_probe_reads_inspect_as_the_parser_does(path: Path, tmp_path: Path, bin_dir: Path) -> None:
    """The probe program's own mapping of `docker inspect` (it runs on the host) agrees with `parse_inspect`."""
    case = json.loads(path.read_text())
    parsed = docker.parse_inspect(case["stdout"])
    ids = [c.id[:12] for c in parsed]
    _fake_docker(
        bin_dir,
        {
            "ps -a --filter label=lanes.managed=true -q": {"stdout": "".join(i + "\n" for i in ids)},
            "inspect " + " ".join(sorted(ids)): {"stdout": case["stdout"]},
            "ps -a --format {{json .}}": {"stdout": ""},
        },
    )
    result = _run(bin_dir, probe_argv([], str(tmp_path / "lease"), str(tmp_path)))
    host = parse_probe("spark1", result.stdout)
    assert host.probe_errors == host_fact_errors()
    assert host.containers == parsed


class RecordedHost:
    """A transport whose host answers each docker command with a recorded output."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = answers
        self.sent: list[list[str]] = []

    async def run(
        self,
        host: HostTarget,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        self.sent.append(list(argv))
        status, stdout, stderr = self.answers.get(tuple(argv), (0, "", ""))
        result = CommandResult(host.name, tuple(argv), status, stdout, stderr, 0.0)
        return checked(result) if check else result  # what the real transports raise

    async def session(self, host: HostTarget, argv: Sequence[str], *, timeout: float = 30.0) -> Session:
        raise AssertionError("docker commands never open a session")

    async def close(self) -> None:
        return None


def _ops(*cases: dict[str, Any]) -> tuple[HostOps, RecordedHost]:
    answers = {tuple(c["argv"]): (c["exit_status"], c["stdout"], c["stderr"]) for c in cases}
    transport = RecordedHost(answers)
    return HostOps(transport, {"spark1": HostTarget("spark1", "10.0.0.1")}), transport


@pytest.mark.parametrize("path", INSPECT_CASES, ids=[p.stem for p in INSPECT_CASES])
async def test_hostops_state_from_recorded_inspect(path: Path) -> None:
    case = _case(path.name)
    ops, _ = _ops(case)
    assert await ops.state("spark1", case["argv"][-1]) == (case["expected"]["state"] or "missing")


async def test_hostops_state_without_docker_is_missing() -> None:
    ops, _ = _ops(_case("docker_inspect_no_docker.json"))
    assert await ops.state("spark1", "lanes-golden-r0") == "missing"


@pytest.mark.parametrize("tool", ["docker", "podman"])
async def test_hostops_pull_checks_the_digest_that_arrived(tool: str) -> None:
    ops, transport = _ops(_case(f"{tool}_image_inspect_pinned.json"))
    await ops.pull("spark1", PULLED)
    assert transport.sent == [["docker", "pull", PULLED], ["docker", "image", "inspect", PULLED]]


async def test_hostops_pull_refuses_an_image_under_other_digests() -> None:
    case = _case("podman_image_inspect_pinned.json")
    elsewhere = REPO + "@sha256:" + "cd" * 32
    ops, _ = _ops(case | {"argv": ["docker", "image", "inspect", elsewhere]})
    with pytest.raises(PermanentError) as info:
        await ops.pull("spark1", elsewhere)
    assert f"pulled {elsewhere} but its digests are ['{PULLED}']" in str(info.value)


async def test_hostops_pull_refuses_unreadable_output() -> None:
    case = _case("docker_image_inspect_pinned.json") | {"stdout": "Error: not json\n"}
    ops, _ = _ops(case)
    with pytest.raises(PermanentError, match="cannot read the digest"):
        await ops.pull("spark1", PULLED)
