"""Every `docker` command lanes sends to a host, and the parsers of what they print.

The executor (`execute/hostops.py`) sends these argv lists over the
transport and hands the output back here; nothing else in lanes spells a
docker command or reads docker's JSON. All functions are pure: builders
return `list[str]` (each lane field one argv item, never a shell string),
parsers take the text a command printed and return typed values or raise
`DockerOutputError` saying what was wrong with it.

The one docker call not built here is inside the probe program
(`probe_script.py`: `docker ps` and `docker inspect` of every managed
container, run on the host so that a cycle costs one round trip). It maps
`docker inspect` the same way `parse_inspect` does; `tests/facts` runs both
over the same recorded outputs.

Why the `docker run` builder can live here: it needs `ContainerSpec`, which
therefore sits in `facts/container.py`, and `facts` is a layer below
`engines` and `policy` in the import contracts (the renderers import the
spec and the labels from here; `facts` imports neither of them). The other
way round, keeping `run` in `engines`, would have split the protocol again.

Hosts run docker (DGX OS) or, on the integration rig, podman behind a
`docker` name. Their outputs differ in places, and the parsers accept both
(recorded cases of each are in `tests/facts/cases/`):
- `inspect`: docker's `Name` starts with "/", podman's does not; docker's
  `Image` is "sha256:<hex>", podman's the bare hex; podman's
  `Config.Entrypoint` is a string, docker's a list (not read here).
- a missing container: both print `[]` on stdout; docker exits 1 with
  "Error: No such object: NAME", podman exits 125 with
  'Error: inspecting object: no such object: "NAME"'. A `[]` is what counts.
- `image inspect`: docker's `Id` is "sha256:<hex>", podman's the bare hex;
  both list `RepoDigests` as "REPO@sha256:<digest>".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.facts.container import ContainerSpec
from reconciler.facts.observed import ObservedContainer

__all__ = [
    "DOCKER",
    "DockerOutputError",
    "InspectedImage",
    "container_state",
    "has_digest",
    "image_inspect_argv",
    "inspect_argv",
    "logs_argv",
    "parse_image_inspect",
    "parse_inspect",
    "pinned_digest",
    "pull_argv",
    "repo_digests",
    "rm_argv",
    "run_argv",
    "stop_argv",
]

DOCKER = "docker"
DIGEST_MARK = "@sha256:"


class DockerOutputError(ValueError):
    """A docker command printed something that is not what docker prints for it."""


# -- commands ------------------------------------------------------------------


def pull_argv(image: str) -> list[str]:
    """Fetch an image (by digest when the lane pins one)."""
    return [DOCKER, "pull", image]


def image_inspect_argv(image: str) -> list[str]:
    """Describe a local image: after a pull, its `RepoDigests` prove the digest arrived."""
    return [DOCKER, "image", "inspect", image]


def inspect_argv(name: str) -> list[str]:
    """Describe one container (its state, while a lane waits for readiness)."""
    return [DOCKER, "inspect", name]


def run_argv(spec: ContainerSpec) -> list[str]:
    """The `docker run` argv for a spec: exactly the flag subset the simulated runtime implements."""
    argv = [
        DOCKER,
        "run",
        "-d",
        "--name",
        spec.name,
        "--restart",
        "no",
        "--gpus",
        spec.gpus,
        "--network",
        spec.network,
        "--ipc",
        spec.ipc,
    ]
    if spec.shm_size is not None:
        argv += ["--shm-size", spec.shm_size]
    if spec.privileged:
        argv.append("--privileged")
    for device in spec.devices:
        argv += ["--device", device]
    for cap in spec.cap_add:
        argv += ["--cap-add", cap]
    for limit in spec.ulimits:
        argv += ["--ulimit", limit]
    for opt in spec.security_opt:
        argv += ["--security-opt", opt]
    if spec.memory is not None:
        argv += ["--memory", spec.memory, "--memory-swap", spec.memory]
    if spec.oom_score_adj is not None:
        argv += ["--oom-score-adj", str(spec.oom_score_adj)]
    for key, value in spec.labels:
        argv += ["--label", f"{key}={value}"]
    for key, value in spec.env:
        argv += ["-e", f"{key}={value}"]
    if spec.env_file is not None:
        argv += ["--env-file", spec.env_file]
    for mount in spec.mounts:
        argv += ["-v", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
    if spec.entrypoint is not None:
        argv += ["--entrypoint", spec.entrypoint]
    argv.append(spec.image)
    argv.extend(spec.command)
    return argv


def stop_argv(name: str, timeout_s: int) -> list[str]:
    """SIGTERM, then SIGKILL after `timeout_s`: an engine gets that long to free its GPU memory."""
    return [DOCKER, "stop", "-t", str(timeout_s), name]


def rm_argv(name: str) -> list[str]:
    """Remove a container, running or not (-f), so its name is free for the next spec."""
    return [DOCKER, "rm", "-f", name]


def logs_argv(name: str, tail: int) -> list[str]:
    """The last `tail` lines a container printed (docker splits them over stdout and stderr)."""
    return [DOCKER, "logs", "--tail", str(tail), name]


# -- outputs -------------------------------------------------------------------


@dataclass(frozen=True)
class InspectedImage:
    """A local image as `docker image inspect` describes it."""

    id: str
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]
    """REPO@sha256:<digest> for every registry digest the image is known under."""
    env: tuple[str, ...] = ()
    """The image's Config.Env (KEY=VALUE)."""


def parse_inspect(stdout: str) -> tuple[ObservedContainer, ...]:
    """The containers `docker inspect NAME...` listed; empty when none exists (docker prints `[]`)."""
    return tuple(_container(item) for item in _json_list(stdout, "docker inspect"))


def container_state(stdout: str) -> str | None:
    """`State.Status` of the one container `docker inspect NAME` described, or None when it does not exist."""
    found = parse_inspect(stdout)
    if len(found) > 1:
        raise DockerOutputError(f"docker inspect described {len(found)} objects for one name")
    return found[0].state if found else None


def parse_image_inspect(stdout: str) -> tuple[InspectedImage, ...]:
    """The images `docker image inspect REF...` listed; empty when none is local."""
    return tuple(_image(item) for item in _json_list(stdout, "docker image inspect"))


def pinned_digest(image: str) -> str | None:
    """The digest (sha256:<hex>) of a reference pinned by one (REPO@sha256:<hex>), else None."""
    if DIGEST_MARK not in image:
        return None
    return image.rsplit("@", 1)[1]


def has_digest(images: Iterable[InspectedImage], digest: str) -> bool:
    """Whether any image is known under `digest`: a pull by digest must leave one that is."""
    return any(d.rpartition("@")[2] == digest for image in images for d in image.repo_digests)


def repo_digests(images: Iterable[InspectedImage]) -> list[str]:
    return [d for image in images for d in image.repo_digests]


def _json_list(stdout: str, command: str) -> list[Any]:
    try:
        data = json.loads(stdout)
    except ValueError:
        raise DockerOutputError(f"{command} printed no JSON: {stdout.strip()[:80]!r}") from None
    if not isinstance(data, list):
        raise DockerOutputError(f"{command} printed a JSON {type(data).__name__}, not a list")
    return data


def _container(item: object) -> ObservedContainer:
    obj = _object(item, "a container")
    state = _object(obj.get("State"), "State")
    config = _object(obj.get("Config") or {}, "Config")
    status = state.get("Status")
    if not isinstance(status, str) or not status:
        raise DockerOutputError(f"docker inspect: container {obj.get('Name')!r} has no State.Status")
    exit_code = state.get("ExitCode")
    if exit_code is not None and (isinstance(exit_code, bool) or not isinstance(exit_code, int)):
        raise DockerOutputError(f"docker inspect: State.ExitCode is not an integer: {exit_code!r}")
    labels = _object(config.get("Labels") or {}, "Config.Labels")
    started = state.get("StartedAt")
    # The same mapping as the probe program's `container()`: docker's "/name" loses its slash,
    # the image reference falls back to podman's ImageName, and the "never" start time
    # (0001-01-01T00:00:00Z) is kept as docker prints it.
    return ObservedContainer(
        name=str(obj.get("Name") or "").removeprefix("/"),
        id=str(obj.get("Id") or obj.get("ID") or ""),
        image=str(config.get("Image") or obj.get("ImageName") or ""),
        image_id=str(obj.get("Image") or ""),
        state=status,
        exit_code=exit_code,
        labels={str(k): str(v) for k, v in labels.items()},
        started_at=None if started is None else str(started),
    )


def _image(item: object) -> InspectedImage:
    obj = _object(item, "an image")
    return InspectedImage(
        id=str(obj.get("Id") or ""),
        repo_tags=_strings(obj.get("RepoTags"), "RepoTags"),
        repo_digests=_strings(obj.get("RepoDigests"), "RepoDigests"),
        env=_strings((obj.get("Config") or {}).get("Env"), "Config.Env"),
    )


def _object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise DockerOutputError(f"{what} is not a JSON object: {str(value)[:60]!r}")
    return value


def _strings(value: object, what: str) -> tuple[str, ...]:
    # docker prints null for an empty list in some versions, [] in others.
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DockerOutputError(f"{what} is not a list of strings: {str(value)[:60]!r}")
    return tuple(value)
