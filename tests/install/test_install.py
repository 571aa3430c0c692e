"""scripts/install: the lanes wheel built from this checkout, staged into a folder (--root) as it would land
on a control node, run from there, verified by systemd-analyze, and installed twice with nothing changed.

Every run here passes --root (a temporary folder): the script then writes nothing outside it, so the
tests never touch this machine's /opt, /etc or users, although they may run as root. Packages come from a
wheelhouse made offline (`wheelhouse.py`): no index is reached. The script runs from a fresh git repository
holding this checkout's files (tracked and new, as `git status` sees them): a clean clone, without .venv or
build/, that stays the same between the runs that compare their results.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install.wheelhouse import local_setuptools, repack, requirement_closure

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "lanes-reconciler.service"
PREFIX = "/opt/lanes"
SYSTEM_PYTHON = Path("/usr/bin/python3")

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (apt install systemd)")
ENV = {**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "", "PIP_NO_CACHE_DIR": "1"}


@dataclass
class Staged:
    clone: Path
    root: Path
    first: str
    second: str
    tree_after_first: dict[str, tuple[int, int, int, float]]
    tree_after_second: dict[str, tuple[int, int, int, float]]

    def path(self, final: str) -> Path:
        return self.root / final.lstrip("/")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=lanes tests", "-c", "user.email=tests@localhost", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's files in a new repository of their own, committed."""
    src = tmp_path_factory.mktemp("clone") / "lanes"
    listed = git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    for name in filter(None, listed):
        original, copy = REPO / name, src / name
        if original.is_symlink():  # git keeps links as links (reconciler/scaffold/policies is one)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.symlink_to(os.readlink(original))
        elif original.is_file():
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(original, copy)
    git(src, "init", "-q")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "snapshot")
    return src


def run_install(clone: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    assert "--root" in args, "every test run stages into a folder"
    return subprocess.run(
        [str(clone / "scripts" / "install"), *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        check=False,
    )


def snapshot(root: Path) -> dict[str, tuple[int, int, int, float]]:
    """Every path under root: mode, owner, size, mtime (what a second run must leave alone)."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (st.st_mode, st.st_uid, st.st_size, st.st_mtime)
    return out


@pytest.fixture(scope="module")
def wheelhouse(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SYSTEM_PYTHON.is_file():
        pytest.skip(f"{SYSTEM_PYTHON} is missing (the install needs a system Python)")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import ensurepip, venv"], check=False, timeout=60).returncode:
        pytest.skip(f"{SYSTEM_PYTHON} has no venv module (apt install python3-venv)")
    out = tmp_path_factory.mktemp("wheelhouse")
    backend = local_setuptools(out)
    if backend is None:
        pytest.skip(
            "no setuptools>=70.1 here to build the wheel offline: neither installed in this environment nor a "
            "wheel in pip's configured find-links or file:// index"
        )
    if backend.parent != out:
        shutil.copy(backend, out)
    # scripts/install installs lanes with its `gateway` extra (SMG).
    for dist in requirement_closure(clone / "pyproject.toml", extras=("gateway",)):
        repack(dist, out)
    return out


@pytest.fixture(scope="module")
def staged(clone: Path, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Staged]:
    root = tmp_path_factory.mktemp("stage") / "root"
    first = run_install(clone, "--root", root, "--wheelhouse", wheelhouse)
    assert first.returncode == 0, first.stdout + first.stderr
    after_first = snapshot(root)
    second = run_install(clone, "--root", root, "--wheelhouse", wheelhouse)
    assert second.returncode == 0, second.stdout + second.stderr
    yield Staged(clone, root, first.stdout, second.stdout, after_first, snapshot(root))
    shutil.rmtree(root, ignore_errors=True)


def lanes(staged: Staged, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """The installed entry point, run by the installed interpreter (its shebang names /opt/lanes)."""
    bin_dir = staged.path(PREFIX) / "bin"
    return subprocess.run(
        [bin_dir / "python", bin_dir / "lanes", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=staged.root,
    )


def test_the_first_run_says_what_it_put_where(staged: Staged) -> None:
    lines = staged.first.splitlines()
    for expected in (
        f"created    {PREFIX} (virtualenv on ",
        "built      spark_lanes-",
        f"installed  {PREFIX}/bin/lanes (spark_lanes-",
        f"linked     /usr/local/bin/lanes -> {PREFIX}/bin/lanes",
        "installed  /etc/systemd/system/lanes-reconciler.service",
        "installed  /etc/systemd/system/lanes-gateway.service",
        "installed  /etc/sysusers.d/lanes.conf",
        "created    /etc/lanes/credentials (0700 ",
        "created    /etc/lanes/lane-secrets (0700 ",
        "created    /var/lib/lanes (0700 ",
        "installed  /etc/lanes/reconciler.toml.example",
    ):
        assert any(line.startswith(expected) for line in lines), f"{expected!r} not in:\n{staged.first}"
    assert "  - pin every Spark's host key in /etc/lanes/known_hosts" in lines
    built = next(line for line in lines if line.startswith("built "))
    commit = git(staged.clone, "rev-parse", "--short", "HEAD").strip()
    assert built.endswith(f"-py3-none-any.whl from {staged.clone} ({commit})"), built


def test_the_staged_tree_is_what_the_unit_expects(staged: Staged) -> None:
    # The unit as shipped (the default prefix changes nothing in it), the example config as shipped.
    installed_unit = staged.path("/etc/systemd/system/lanes-reconciler.service")
    assert installed_unit.read_bytes() == UNIT.read_bytes()
    assert f"\nExecStart={PREFIX}/bin/lanes daemon " in installed_unit.read_text()
    example = staged.path("/etc/lanes/reconciler.toml.example")
    assert example.read_bytes() == (REPO / "systemd" / "reconciler.toml.example").read_bytes()
    assert staged.path("/etc/sysusers.d/lanes.conf").read_bytes() == (REPO / "systemd" / "lanes.sysusers").read_bytes()
    assert os.readlink(staged.path("/usr/local/bin/lanes")) == f"{PREFIX}/bin/lanes"
    assert not staged.path("/etc/lanes/reconciler.toml").exists(), "the operator writes the config, never the script"
    modes = {
        "/etc/lanes": 0o750,
        "/etc/lanes/credentials": 0o700,
        "/etc/lanes/lane-secrets": 0o700,
        "/etc/credstore": 0o700,
        "/var/lib/lanes": 0o700,
        "/etc/systemd/system/lanes-reconciler.service": 0o644,
        "/etc/systemd/system/lanes-gateway.service": 0o644,
    }
    # The gateway's unit as shipped, and SMG (the `gateway` extra) in the virtualenv it runs from.
    gateway_unit = staged.path("/etc/systemd/system/lanes-gateway.service")
    assert gateway_unit.read_bytes() == (REPO / "systemd" / "lanes-gateway.service").read_bytes()
    assert list(staged.path(PREFIX).glob("lib/python3*/site-packages/smg-1.13.0.dist-info")), "smg is not installed"
    assert {p: stat.S_IMODE(staged.path(p).stat().st_mode) for p in modes} == modes


@pytest.mark.skipif(os.geteuid() != 0, reason="the user and ownership are set only when the script runs as root")
def test_the_service_user_owns_the_state_directory(staged: Staged) -> None:
    passwd = staged.path("/etc/passwd").read_text().splitlines()
    entry = next(line.split(":") for line in passwd if line.startswith("lanes:"))
    uid, gid = int(entry[2]), int(entry[3])
    assert entry[5:] == ["/var/lib/lanes", "/usr/sbin/nologin"]
    assert uid < 1000 and gid < 1000, "a system user"  # SYS_UID_MAX of Debian's login.defs is 999
    folders = ("/etc/lanes", "/var/lib/lanes", "/etc/lanes/credentials", "/etc/lanes/lane-secrets")
    owners = {p: (staged.path(p).stat().st_uid, staged.path(p).stat().st_gid) for p in folders}
    assert owners == {
        "/etc/lanes": (0, gid),  # the service reads its config, root writes it
        "/var/lib/lanes": (uid, gid),
        "/etc/lanes/credentials": (0, 0),  # systemd reads them as root (LoadCredential=), the service never does
        "/etc/lanes/lane-secrets": (0, 0),
    }


def test_nothing_in_the_tree_names_the_staging_folder(staged: Staged) -> None:
    venv = staged.path(PREFIX)
    assert (venv / "bin" / "lanes").read_text().splitlines()[0] == f"#!{PREFIX}/bin/python"
    leftovers = [
        str(p.relative_to(staged.root))
        for p in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]
        if p.is_file() and not p.is_symlink() and str(staged.root).encode() in p.read_bytes()
    ]
    assert leftovers == []
    # Byte-compiled ahead (the unit's file system is read-only), with the final source paths recorded.
    source = next(venv.glob("lib/python3*/site-packages/reconciler/cli/main.py"))
    pyc = next((source.parent / "__pycache__").glob("main.*.pyc"))
    assert f"{PREFIX}/lib/".encode() in pyc.read_bytes() and str(staged.root).encode() not in pyc.read_bytes()


def test_the_installed_lanes_runs_from_its_own_environment(staged: Staged) -> None:
    venv = staged.path(PREFIX)
    where = subprocess.run(
        [venv / "bin" / "python", "-I", "-c", "import reconciler, pygit2; print(reconciler.__file__, pygit2.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert all(path.startswith(f"{venv}/lib/") for path in where), where
    # On the system Python, not the one running the tests (a pyenv or venv Python would hide under /root).
    assert os.path.realpath(venv / "bin" / "python") == os.path.realpath(SYSTEM_PYTHON)
    assert lanes(staged, "--help").returncode == 0


UNSHARE = shutil.which("unshare")


@pytest.mark.skipif(
    UNSHARE is None or os.geteuid() != 0, reason="needs root and unshare(1) for a private mount namespace"
)
def test_the_installed_lanes_runs_at_its_final_path_with_the_homes_hidden(staged: Staged) -> None:
    """What the unit gives it: the tree at /opt/lanes, read-only (ProtectSystem=strict), and /home, /root and
    /run/user empty (ProtectHome=). A private mount namespace shows exactly that to the commands run in it,
    while this machine's /opt, /home and /root stay as they are (the mounts live and die with the namespace)."""
    assert UNSHARE is not None
    example = staged.path("/etc/lanes/reconciler.toml.example")
    script = f"""
        mount -t tmpfs tmpfs /opt
        mkdir {PREFIX}
        mount --bind {shlex.quote(str(staged.path(PREFIX)))} {PREFIX}
        mount -o remount,bind,ro {PREFIX}
        for home in /home /root /run/user; do
            if [ -d "$home" ]; then mount -t tmpfs -o ro,mode=000 tmpfs "$home"; fi
        done
        cd /
        {PREFIX}/bin/lanes --version
        # The example as installed is refused (exit 2) until its placeholders are set: it runs, and says so.
        {PREFIX}/bin/lanes config check --systemd --config {shlex.quote(str(example))} >/dev/null 2>&1 || [ $? -eq 2 ]
        {PREFIX}/bin/lanes check --repo {shlex.quote(str(staged.clone))} --json
    """
    result = subprocess.run(
        [UNSHARE, "--mount", "--propagation", "private", "sh", "-ec", script],
        capture_output=True,
        text=True,
        timeout=180,
        env={"PATH": "/usr/bin:/bin", "HOME": "/var/lib/lanes", "LANG": "C.UTF-8"},
        check=False,
    )
    first_line, _, rest = result.stdout.partition("\n")
    assert first_line.startswith("lanes "), result.stdout + result.stderr
    assert result.returncode in (0, 1), result.stdout + result.stderr  # check: 1 is a deny, still a verdict
    assert "commit" in json.loads(rest), rest


def test_the_installed_lanes_says_its_version(staged: Staged) -> None:
    venv = staged.path(PREFIX)
    installed = subprocess.run(
        [venv / "bin" / "python", "-I", "-c", "import importlib.metadata as m; print(m.version('spark-lanes'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    result = lanes(staged, "--version")
    assert result.returncode == 0, result.stdout + result.stderr
    assert installed in result.stdout.split(), result.stdout


def test_the_wheel_carries_the_scaffold(staged: Staged, tmp_path: Path) -> None:
    """Package data (reconciler/scaffold) comes with the wheel: `lanes init` from the installed tree."""
    result = lanes(staged, "init", tmp_path / "state-repo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "state-repo" / "state" / "fleet.yaml").is_file()
    assert (tmp_path / "state-repo" / "policies" / "rules.yaml").is_file()


def test_the_installed_lanes_checks_the_example_as_the_checkout_does(staged: Staged) -> None:
    installed = lanes(staged, "check", "--repo", REPO, "--json")
    checkout = subprocess.run(
        [Path(sys.executable).parent / "lanes", "check", "--repo", REPO, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == checkout.returncode, installed.stdout + installed.stderr
    assert installed.returncode in (0, 1), installed.stdout + installed.stderr
    assert json.loads(installed.stdout) == json.loads(checkout.stdout)


def test_the_installed_example_config_is_refused_until_its_placeholders_are_set(staged: Staged) -> None:
    """`config check --systemd` names the example's placeholder repo URL (a unit started with it would fetch
    nothing) and checks every other section: exit 2, never a traceback."""
    example = staged.path("/etc/lanes/reconciler.toml.example")
    result = lanes(staged, "config", "check", "--systemd", "--config", example)
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "repo.url" in said and "placeholder" in said, said
    assert "Traceback" not in said


def test_a_second_run_changes_nothing(staged: Staged) -> None:
    verbs = {line.split()[0] for line in staged.second.splitlines() if not line.startswith(("still to do", "  - "))}
    assert verbs == {"unchanged", "built"}, staged.second
    assert staged.tree_after_second == staged.tree_after_first


@needs_analyze
def test_systemd_analyze_verify_passes_on_the_installed_unit(staged: Staged, tmp_path: Path) -> None:
    """verify --root looks up ExecStart=, ExecReload= and the units it depends on inside the root: the
    staged tree gets this machine's unit files and kill(1) next to what the script installed."""
    assert ANALYZE is not None
    root = staged.root
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True, dirs_exist_ok=True)
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("kill") or "/bin/kill", root / "usr/bin/kill")
    if not (root / "bin").exists():
        (root / "bin").symlink_to("usr/bin")
    verify = [ANALYZE, f"--root={root}", "verify", "--recursive-errors=yes", "--man=no", "lanes-reconciler.service"]
    result = subprocess.run(verify, capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")

    # The same check fails once the entry point is gone: verify looked for it in the staged tree.
    entry = staged.path(f"{PREFIX}/bin/lanes")
    entry.rename(tmp_path / "lanes")
    try:
        missing = subprocess.run(verify, capture_output=True, text=True, env=ENV, timeout=120, check=False)
    finally:
        (tmp_path / "lanes").rename(entry)
    assert missing.returncode != 0
    assert f"Command {PREFIX}/bin/lanes is not executable" in missing.stdout + missing.stderr

    assert exposure(root, "lanes-reconciler.service") <= 2.0


def exposure(root: Path, unit: str) -> float:
    """`systemd-analyze security`'s overall exposure level of `unit` as installed under `root` (0 to 10)."""
    assert ANALYZE is not None
    security = subprocess.run(
        [ANALYZE, f"--root={root}", "security", "--offline=true", "--no-pager", unit],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    found = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d+)", security.stdout)
    assert found, security.stdout + security.stderr
    return float(found.group(1))


@needs_analyze
def test_the_gateway_unit_verifies_and_is_as_hardened_as_the_daemons(staged: Staged) -> None:
    """lanes-gateway.service runs SMG from the virtualenv the script made (the `gateway` extra)."""
    assert ANALYZE is not None
    root = staged.root
    if not (root / "usr/lib/systemd/system").exists():  # the daemon unit's test may have copied them already
        shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    # ExecStart= is the virtualenv's python, a link to the system interpreter: verify follows it inside the root.
    python = staged.path(f"{PREFIX}/bin/python")
    while python.is_symlink():
        target = Path(os.readlink(python))
        python = root / str(target).lstrip("/") if target.is_absolute() else python.parent / target
        if not python.exists() and target.is_absolute():
            python.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(target, python)
    verify = [ANALYZE, f"--root={root}", "verify", "--recursive-errors=yes", "--man=no", "lanes-gateway.service"]
    result = subprocess.run(verify, capture_output=True, text=True, env=ENV, timeout=120, check=False)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    assert exposure(root, "lanes-gateway.service") <= 2.0


def test_a_prefix_the_unit_cannot_see_is_refused(clone: Path, tmp_path: Path) -> None:
    result = run_install(clone, "--root", tmp_path / "root", "--prefix", "/home/op/lanes")
    assert result.returncode == 2
    assert "ProtectHome= hides it" in result.stderr
    assert not (tmp_path / "root").exists(), "refused before anything was written"


def test_a_python_the_unit_cannot_see_is_refused(clone: Path, tmp_path: Path) -> None:
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if not base.startswith(("/home/", "/root/")):
        pytest.skip(f"the Python running the tests ({base}) is not under /home or /root")
    result = run_install(clone, "--root", tmp_path / "root", "--python", sys.executable)
    assert result.returncode == 2
    assert f"runs from {base}, which the unit's ProtectHome= hides" in result.stderr
    assert not (tmp_path / "root").exists()


def test_a_prefix_in_another_place_goes_into_the_unit(clone: Path, wheelhouse: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = run_install(
        clone, "--root", root, "--wheelhouse", wheelhouse, "--prefix", "/srv/lanes", "--bindir", "/usr/bin"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    unit = (root / "etc/systemd/system/lanes-reconciler.service").read_text()
    assert unit == UNIT.read_text().replace(f"ExecStart={PREFIX}/bin/lanes ", "ExecStart=/srv/lanes/bin/lanes ")
    assert os.readlink(root / "usr/bin/lanes") == "/srv/lanes/bin/lanes"
    assert (root / "srv/lanes/bin/lanes").read_text().startswith("#!/srv/lanes/bin/python\n")
