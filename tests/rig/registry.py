"""The rig's registry: Debian's distribution registry 2.8 holding the engine stand-in image.

Hosts pull `REGISTRY/lanes/standin@sha256:...` from it over the rig network,
exactly as Sparks pull engine images by digest. Two tags with different
content give two digests (an image bump), and a well-formed digest that was
never pushed gives a pull that must fail.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.rig import image
from tests.rig.machine import IMAGE_REPO, REGISTRY, RigError, podman_local

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


@dataclass(frozen=True)
class Images:
    """The stand-in image in the rig's registry, as digest references."""

    v1: str
    v2: str
    missing: str
    """A well-formed digest reference the registry does not hold."""


class Registry:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.folder / "registry.log"

    def start(self) -> None:
        config = self.folder / "registry.yml"
        config.write_text(
            json.dumps(
                {  # JSON is YAML
                    "version": 0.1,
                    "log": {"level": "warn", "accesslog": {"disabled": True}},
                    "storage": {
                        "filesystem": {"rootdirectory": str(self.folder / "registry")},
                        "delete": {"enabled": True},
                    },
                    "http": {"addr": REGISTRY},
                }
            )
        )
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                ["docker-registry", "serve", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        (self.folder / "registry.pid").write_text(f"{self.proc.pid}\n")  # for a later run's cleanup_stale
        deadline = time.monotonic() + 15
        while True:
            try:
                if httpx.get(f"http://{REGISTRY}/v2/", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RigError(f"docker-registry did not come up: {self.log.read_text()}")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Stop the registry (its storage stays: `start` serves the same images again)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def digest(self, tag: str) -> str:
        """The manifest digest the registry serves for a tag (what a pin must say)."""
        r = httpx.head(
            f"http://{REGISTRY}/v2/{IMAGE_REPO}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=5
        )
        if r.status_code != 200 or "docker-content-digest" not in r.headers:
            raise RigError(f"registry has no manifest for {IMAGE_REPO}:{tag} (HTTP {r.status_code})")
        return r.headers["docker-content-digest"]

    def _push(self, store: Path, tar: Path, tag: str, env: dict[str, str], cmd: str) -> str:
        """Import one root tarball as `IMAGE_REPO:tag` with this env and CMD, push it; its digest reference."""
        changes = [f"ENV {key}={value}" for key, value in {"PATH": "/usr/local/bin:/usr/bin:/bin", **env}.items()]
        name = f"{REGISTRY}/{IMAGE_REPO}:{tag}"
        podman_local(store, "import", *(a for c in [*changes, f"CMD {cmd}"] for a in ("--change", c)), str(tar), name)
        podman_local(store, "push", "--tls-verify=false", name)
        return f"{REGISTRY}/{IMAGE_REPO}@{self.digest(tag)}"

    def push_standin_images(self, repo: Path, work: Path, store: Path, rig_id: str) -> Images:
        """Build the stand-in root once, import it as v1 and v2 (one file differs), push both."""
        root = work / "rootfs"
        root.mkdir(parents=True)
        image.build_rootfs(repo, root, work)
        refs = {}
        for tag in ("v1", "v2"):
            tar = work / f"{tag}.tar"
            image.write_tar(root, tar, {"etc/lanes-rig-image": f"{rig_id} {tag}\n"})
            env = {"STANDIN_LOAD_S": "0.2", "STANDIN_TG_TPS": "500", "STANDIN_VERSION": f"rig-{tag}"}
            refs[tag] = self._push(store, tar, tag, env, '["python3", "-m", "reconciler.sim.standin"]')
        missing = "sha256:" + hashlib.sha256(f"{rig_id} never pushed".encode()).hexdigest()
        return Images(v1=refs["v1"], v2=refs["v2"], missing=f"{REGISTRY}/{IMAGE_REPO}@{missing}")

    def push_engine_image(self, repo: Path, work: Path, store: Path, tag: str, env: dict[str, str]) -> str:
        """An engine image carrying its own parser (`image.build_rootfs(with_parser=True)`: a `vllm` command
        and vLLM's CLI modules over the stand-in), with the image env `env` (its STANDIN_VERSION, the build
        it is, and STANDIN_PARSER, the parser it carries); its digest reference."""
        root = work / f"rootfs-{tag}"
        root.mkdir(parents=True)
        image.build_rootfs(repo, root, work, with_parser=True)
        tar = work / f"{tag}.tar"
        image.write_tar(root, tar, {"etc/lanes-rig-image": f"{tag}\n"})
        return self._push(store, tar, tag, {"STANDIN_LOAD_S": "0.2", "STANDIN_TG_TPS": "500", **env}, '["vllm"]')
