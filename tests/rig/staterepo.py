"""The rig's state repository: a work tree the tests commit lanes in, a bare "forge" it is pushed to,
and the clone `lanes` reads (as a daemon's mirror would), all plain git.

Files are written as JSON, which is YAML: every string a test puts in a lane
(newlines, quotes, `$(...)`) reaches lanes' YAML loader exactly, escaped.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rig.machine import ENGINE_PORT, FABRIC_INTERFACE, STANDIN_ARGS, RigError, sh

MODEL = "tiny"

DEFAULT_HEALTH = {
    "port_timeout_s": 30,
    "ready_timeout_s": 30,
    "models_timeout_s": 15,
    "completion_timeout_s": 15,
    "poll_interval_s": 0.25,
}
"""Readiness stages sized for the stand-in (it is ready in well under a second), not for a big model."""

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "rig",
    "GIT_AUTHOR_EMAIL": "rig@lanes.invalid",
    "GIT_COMMITTER_NAME": "rig",
    "GIT_COMMITTER_EMAIL": "rig@lanes.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def write_json_yaml(path: Path, body: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class StateRepo:
    folder: Path

    @property
    def work(self) -> Path:
        return self.folder / "state-work"

    @property
    def forge(self) -> Path:
        return self.folder / "forge.git"

    @property
    def clone(self) -> Path:
        """What `lanes --repo` reads."""
        return self.folder / "state-clone"

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return sh(["git", *args], cwd=cwd, env={**os.environ, **_GIT_ENV}).stdout.strip()

    def init(
        self,
        *,
        policies: Path,
        hosts: Mapping[str, tuple[str, str]],
        model_path: Path,
        hf_cache: Path,
        state_on_host: Path,
        label: str,
    ) -> None:
        """Fleet, hosts (name -> SSH and data-plane address), the tiny model and the project's policies; no lane.

        The fleet runs ranks rootless: the hosts' data-plane ports name no RoCE device (a veth has none), so no
        device is passed, and podman applies the rest (IPC_LOCK, memlock and stack ulimits, the memory cap)."""
        self.git("init", "-q", "--bare", "-b", "main", str(self.forge))
        self.git("init", "-q", "-b", "main", str(self.work))
        shutil.copytree(policies, self.work / "policies")
        # The rig's hosts mount folders of the rig's own (a test's odd-named folder): allow it as a site would
        # allow its scratch disk, in the same policy file a fleet edits.
        rules = self.work / "policies" / "rules.yaml"
        allow = "allow: [/models, /data, /scratch]"
        if allow not in rules.read_text():
            raise RigError(f"policies/rules.yaml no longer says `{allow}`: teach the rig its new shape")
        rules.write_text(rules.read_text().replace(allow, f"allow: [/models, /data, /scratch, {self.folder}]"))
        state = self.work / "state"
        for folder in ("hosts", "models", "lanes"):
            (state / folder).mkdir(parents=True)
        write_json_yaml(
            state / "fleet.yaml",
            {
                "ssh_user": "root",
                "ssh_port": 22,
                "hf_cache": str(hf_cache),
                "state_dir_on_host": str(state_on_host),
                "lease_ttl_s": 300,
                # No --ulimit: this machine's root lacks CAP_SYS_RESOURCE, so runc may not raise any rlimit, and
                # podman 4.3 given one --ulimit also raises nofile and nproc to its defaults (the rig refuses both).
                "container": {"mode": "rootless", "ulimits": []},
            },
        )
        for name, (address, fabric) in hosts.items():
            write_json_yaml(
                state / "hosts" / f"{name}.yaml",
                {
                    "address": address,
                    "hardware": "gb10",
                    "labels": {"rig": label},
                    "data_plane": [{"interface": FABRIC_INTERFACE, "address": f"{fabric}/24"}],
                },
            )
        write_json_yaml(
            state / "models" / f"{MODEL}.yaml",
            {
                "hf_repo": "lanes-rig/tiny",
                "revision": "0" * 40,
                "path": str(model_path),
                "weight_bytes": 64 * 1024 * 1024,
                "quantization": "bf16",
                "architecture": {
                    "layers": 2,
                    "attention": "gqa",
                    "num_heads": 4,
                    "kv_heads": 2,
                    "head_dim": 64,
                    "hidden_size": 256,
                },
            },
        )
        self.git("add", "-A", cwd=self.work)
        self.git("commit", "-q", "-m", "rig: fleet, hosts, model, policies", cwd=self.work)
        self.git("remote", "add", "origin", str(self.forge), cwd=self.work)
        self.git("push", "-q", "origin", "main", cwd=self.work)
        self.git("clone", "-q", str(self.forge), str(self.clone))

    def publish(
        self, lanes: Mapping[str, Mapping[str, Any]], message: str, hosts: Mapping[str, Mapping[str, Any]] | None = None
    ) -> str:
        """Commit exactly these lanes (and changes to these host files), `git push` to the forge, pull into the
        clone; the new sha."""
        for name, changes in (hosts or {}).items():
            path = self.work / "state" / "hosts" / f"{name}.yaml"
            write_json_yaml(path, {**json.loads(path.read_text()), **changes})
        folder = self.work / "state" / "lanes"
        for old in folder.glob("*.yaml"):
            old.unlink()
        for name, body in lanes.items():
            write_json_yaml(folder / f"{name}.yaml", body)
        self.git("add", "-A", cwd=self.work)
        self.git("commit", "-q", "--allow-empty", "-m", message, cwd=self.work)
        self.git("push", "-q", "origin", "main", cwd=self.work)
        self.git("pull", "-q", "--ff-only", cwd=self.clone)
        sha = self.git("rev-parse", "HEAD", cwd=self.clone)
        if sha != self.git("rev-parse", "HEAD", cwd=self.work):
            raise RigError("the clone did not get the pushed commit")
        return sha


def lane_body(
    name: str,
    hosts: Sequence[str],
    image_ref: str,
    *,
    port: int = ENGINE_PORT,
    desired: str = "running",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] | None = None,
    mounts: Sequence[Mapping[str, Any]] = (),
    health: Mapping[str, float] | None = None,
    served: str | None = None,
) -> dict[str, Any]:
    """A generic-engine lane (its args are the whole command) running the stand-in, TP over its hosts."""
    served_name = served or f"{name}-model"
    command = (
        list(args) if args is not None else [*STANDIN_ARGS, "--port", str(port), "--served-model-name", served_name]
    )
    return {
        "description": f"rig lane {name}",
        "desired": desired,
        "engine": "generic",
        "engine_version": "0.0.0+standin",
        "image": image_ref,
        "model": MODEL,
        "served_model_name": served_name,
        "hosts": list(hosts),
        "tp": len(hosts),
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.3,
        "port": port,
        "args": command,
        "env": dict(env or {}),
        "mounts": [dict(m) for m in mounts],
        "health": dict(health or DEFAULT_HEALTH),
    }
