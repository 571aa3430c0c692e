"""Host and origin addresses are host names or IP addresses, checked at load (issue 24, hole 1).

An address is put into ssh's and rsync's argv; `-oProxyCommand=...` as an address was stopped only by
OpenSSH's own host-name check. `lanes check` now refuses it with exit 2, naming file, line and field.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import repo_files
from tests.support.gitrepo import make_repo

pytestmark = pytest.mark.timeout(60)
EVIL = "-oProxyCommand=touch /tmp/lanes-owned"


@pytest.mark.parametrize("address", [EVIL, "dgx1 -p 2222", "root@dgx1", "dgx1:22", "-dgx1", "a..b"])
def test_a_host_address_that_is_no_host_name_nor_ip_is_refused_at_load(tmp_path: Path, address: str) -> None:
    files = repo_files()
    text = files["state/hosts/dgx1.yaml"].decode()
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("address:"))
    files["state/hosts/dgx1.yaml"] = (
        "\n".join(f"address: '{address}'" if t.startswith("address:") else t for t in text.splitlines()).encode()
        + b"\n"
    )
    make_repo(tmp_path, files)
    run = CliRunner().invoke(app, ["check", "--repo", str(tmp_path)])
    assert run.exit_code == 2, run.output
    assert f"state/hosts/dgx1.yaml:{line}: address:" in run.output, run.output
    assert "is not a host name" in run.output


def test_an_origin_host_address_is_checked_too(tmp_path: Path) -> None:
    files = repo_files()
    files["state/fleet.yaml"] += f"origins:\n  - {{name: nas1, address: '{EVIL}'}}\n".encode()
    make_repo(tmp_path, files)
    run = CliRunner().invoke(app, ["check", "--repo", str(tmp_path)])
    assert run.exit_code == 2, run.output
    assert "state/fleet.yaml:" in run.output and "origins[0].address" in run.output, run.output


@pytest.mark.parametrize("address", ["10.0.0.1", "fe80::1", "dgx1", "dgx1.lab.example.org", "spark-01."])
def test_names_and_addresses_load(tmp_path: Path, address: str) -> None:
    files = repo_files()
    text = files["state/hosts/dgx1.yaml"].decode()
    files["state/hosts/dgx1.yaml"] = (
        "\n".join(f"address: '{address}'" if t.startswith("address:") else t for t in text.splitlines()).encode()
        + b"\n"
    )
    make_repo(tmp_path, files)
    run = CliRunner().invoke(app, ["check", "--repo", str(tmp_path)])
    assert run.exit_code in (0, 1), run.output
