"""`lanes check` denies, by the `mounts` rule, every host path a lane names that the rule's deny list
keeps out of containers, in whichever field it is named (issue 24, hole 6).

Before, `mounts:` alone was checked: a model `path: /root/.ssh`, `hf_cache: /etc` (mounted read-write)
or `state_dir_on_host: /` passed with exit 0. Each case is a real commit of the example state with one
field changed; the answer is exit 1 with the rule named and the file and field in the message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import PRODUCTION, repo_files
from tests.support.gitrepo import make_repo

pytestmark = pytest.mark.timeout(60)


def _model_file(files: dict[str, bytes]) -> str:
    lane = files[f"state/lanes/{PRODUCTION}.yaml"].decode()
    model = re.search(r"^model: *(\S+)", lane, re.MULTILINE)
    assert model is not None
    return f"state/models/{model.group(1)}.yaml"


def _set(files: dict[str, bytes], path: str, key: str, value: str) -> None:
    text = files[path].decode()
    changed, count = re.subn(rf"^{key}:.*$", f"{key}: {value}", text, flags=re.MULTILINE)
    files[path] = (changed if count else text + f"{key}: {value}\n").encode()


@pytest.mark.parametrize(
    ("where", "key", "value", "relation"),
    [
        ("model", "path", "/", "is /"),
        ("model", "path", "/root/.ssh", "is /root/.ssh"),
        ("model", "path", "/var/lib/lanes", "is /var/lib/lanes"),  # the example fleet's state_dir_on_host
        ("fleet", "hf_cache", "/", "is /"),
        ("fleet", "hf_cache", "/etc", "is /etc"),
        ("fleet", "state_dir_on_host", "/", "is /"),
    ],
)
def test_a_denied_host_path_in_any_field_is_denied_by_the_mounts_rule(
    tmp_path: Path, where: str, key: str, value: str, relation: str
) -> None:
    files = repo_files()
    path = _model_file(files) if where == "model" else "state/fleet.yaml"
    _set(files, path, key, value)
    make_repo(tmp_path, files)
    run = CliRunner().invoke(app, ["check", "--repo", str(tmp_path), "--json"])
    assert run.exit_code == 1, run.output
    verdict = json.loads(run.stdout)
    hits = [v for v in verdict["violations"] if v["rule"] == "mounts" and v["severity"] == "deny"]
    assert hits, run.output
    assert any(f"{path}: {key}: host path {value} {relation}" in v["message"] for v in hits), hits
    assert all("mounts.deny" in v["message"] for v in hits)
