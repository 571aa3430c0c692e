"""`[ssh] origin_roots`: the operator's allowlist of control-node origin folders (issue 24, hole 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.daemon.config import ConfigError, parse_config

pytestmark = pytest.mark.timeout(30)


def _config(tmp_path: Path, roots: str) -> str:
    return (
        f'[repo]\nurl = "{tmp_path}/state"\nmirror_dir = "{tmp_path}/mirror"\n'
        f'[ssh]\nkey = "{tmp_path}/creds/ssh-key"\nknown_hosts = "{tmp_path}/conf/known_hosts"\n'
        f"origin_roots = {roots}\n"
        f'[daemon]\ndb = "{tmp_path}/state-dir/lanes.db"\n'
    )


def test_origin_roots_reach_the_cycle_with_the_daemons_folders_kept_out(tmp_path: Path) -> None:
    cfg = parse_config(_config(tmp_path, f'["{tmp_path}/models"]'), env={}, base_dir=tmp_path)
    origins = cfg.cycle_settings().origins
    assert origins.roots == (tmp_path / "models",)
    assert {tmp_path / "creds", tmp_path / "conf", tmp_path / "state-dir", tmp_path / "mirror"} <= set(
        origins.forbidden
    )


@pytest.mark.parametrize("root", ["creds", "", "state-dir/sub"])
def test_a_root_holding_or_inside_the_daemons_folders_is_refused(tmp_path: Path, root: str) -> None:
    with pytest.raises(ConfigError, match=r"ssh.origin_roots: .* overlap"):
        parse_config(_config(tmp_path, f'["{tmp_path / root}"]'), env={}, base_dir=tmp_path)


def test_a_relative_or_root_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="origin_roots"):
        parse_config(_config(tmp_path, '["/"]'), env={}, base_dir=tmp_path)
