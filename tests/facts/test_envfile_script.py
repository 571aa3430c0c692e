"""The env-file script run for real in a temporary directory, and the simulated host held to the same outcomes.

Each case sets up one situation twice, on this machine's filesystem and on a simulated Spark, runs the same
argv on both (the real script with this machine's python3, the sim through `SimContainerRuntime.execute`)
and compares what is left: exit status, and for every path of interest whether it is a regular file (mode
and text), a symlink, or absent. Ownership cases chown to another uid, so they need root.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reconciler.facts import commands as fc
from reconciler.sim.hostfacts import EnvFile, SimDir, SimLink
from reconciler.sim.registry import SimRegistry
from reconciler.sim.runtime import SimContainerRuntime

pytestmark = pytest.mark.timeout(60)

OTHER_UID = 4242
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="chown to another uid needs root")

SECRET = "HF_TOKEN=hf_new_secret\n"
OLD = "HF_TOKEN=hf_old\n"
VICTIM = "precious: do not touch\n"


def _python_argv(argv: list[str]) -> list[str]:
    assert argv[0] == "python3"
    return [sys.executable, *argv[1:]]


def run_real(argv: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(_python_argv(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False)


@dataclass
class Setup:
    """One situation: files (path -> (text, mode)), symlinks (path -> (target, ours)), dirs (path -> (ours, mode))."""

    files: dict[str, tuple[str, int]] = field(default_factory=dict)
    links: dict[str, tuple[str, bool]] = field(default_factory=dict)
    dirs: dict[str, tuple[bool, int]] = field(default_factory=dict)

    @staticmethod
    def _parent(p: Path) -> None:
        """Directories made along the way are ours and 0700 (whatever this machine's umask)."""
        missing = [d for d in reversed(p.parents) if not d.exists()]
        for d in missing:
            d.mkdir(mode=0o700)
            d.chmod(0o700)

    def on_disk(self, root: Path) -> None:
        for d, (ours, mode) in self.dirs.items():
            p = root / d.lstrip("/")
            self._parent(p / "x")
            p.chmod(mode)
            if not ours:
                os.chown(p, OTHER_UID, OTHER_UID)
        for f, (text, mode) in self.files.items():
            p = root / f.lstrip("/")
            self._parent(p)
            p.write_text(text)
            p.chmod(mode)
        for link, (target, ours) in self.links.items():
            p = root / link.lstrip("/")
            self._parent(p)
            p.symlink_to(root / target.lstrip("/"))
            if not ours:
                os.lchown(p, OTHER_UID, OTHER_UID)

    def on_sim(self, rt: SimContainerRuntime) -> None:
        facts = rt.facts
        for d, (ours, mode) in self.dirs.items():
            facts.dirs[d] = SimDir(ours=ours, mode=mode)
        for f, (text, mode) in self.files.items():
            facts.envfiles[f] = EnvFile(content=text, mode=mode)
        for link, (target, ours) in self.links.items():
            facts.links[link] = SimLink(target=target, ours=ours)


Seen = tuple[str, ...]


def seen_on_disk(root: Path, path: str) -> Seen:
    p = root / path.lstrip("/")
    if p.is_symlink():
        return ("link", "/" + str(Path(os.readlink(p)).relative_to(root)))
    if not p.exists():
        return ("absent",)
    return ("file", oct(stat.S_IMODE(p.stat().st_mode)), p.read_text())


def seen_on_sim(rt: SimContainerRuntime, path: str) -> Seen:
    if path in rt.facts.links:
        return ("link", rt.facts.links[path].target)
    if path in rt.facts.envfiles:
        f = rt.facts.envfiles[path]
        return ("file", oct(f.mode), f.content)
    return ("absent",)


@dataclass(frozen=True)
class Case:
    name: str
    setup: Setup
    argv: Callable[[], list[str]]
    stdin: str
    status: int
    expect: dict[str, Seen]
    root_only: bool = False


ENV = "/state/env/lanes-l1-r0.env"
TMP = "/state/env/.lanes-l1-r0.env.tmp"
ELSEWHERE = "/elsewhere/lanes-l1-r0.env"

CASES = [
    Case(
        "fresh-file-in-a-new-directory",
        Setup(),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ENV: ("file", "0o600", SECRET), TMP: ("absent",)},
    ),
    Case(
        "a-0644-file-ends-0600-with-the-new-text",
        Setup(files={ENV: (OLD, 0o644)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ENV: ("file", "0o600", SECRET)},
    ),
    Case(
        "a-symlink-at-the-path-is-replaced-its-target-untouched",
        Setup(files={"/victim": (VICTIM, 0o644)}, links={ENV: ("/victim", True)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ENV: ("file", "0o600", SECRET), "/victim": ("file", "0o644", VICTIM)},
    ),
    Case(
        "a-symlink-at-the-temporary-name-is-not-followed",
        Setup(files={"/victim": (VICTIM, 0o644)}, links={TMP: ("/victim", True)}, dirs={"/state/env": (True, 0o700)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ENV: ("file", "0o600", SECRET), TMP: ("absent",), "/victim": ("file", "0o644", VICTIM)},
    ),
    Case(
        "a-stale-temporary-file-is-cleared",
        Setup(files={TMP: ("HF_TOKEN=half", 0o644)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ENV: ("file", "0o600", SECRET), TMP: ("absent",)},
    ),
    Case(
        "a-directory-symlink-of-ours-is-followed",
        Setup(dirs={"/elsewhere": (True, 0o700), "/state": (True, 0o700)}, links={"/state/env": ("/elsewhere", True)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        0,
        {ELSEWHERE: ("file", "0o600", SECRET), "/state/env": ("link", "/elsewhere")},
    ),
    Case(
        "a-directory-symlink-owned-by-another-user-is-refused",
        Setup(dirs={"/elsewhere": (True, 0o700), "/state": (True, 0o700)}, links={"/state/env": ("/elsewhere", False)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        fc.ENVFILE_REFUSED_EXIT,
        {ELSEWHERE: ("absent",), "/state/env": ("link", "/elsewhere")},
        root_only=True,
    ),
    Case(
        "a-directory-owned-by-another-user-is-refused",
        Setup(dirs={"/state/env": (False, 0o700)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        fc.ENVFILE_REFUSED_EXIT,
        {ENV: ("absent",)},
        root_only=True,
    ),
    Case(
        "a-group-writable-directory-is-refused",
        Setup(dirs={"/state/env": (True, 0o770)}),
        lambda: fc.envfile_argv(ENV),
        SECRET,
        fc.ENVFILE_REFUSED_EXIT,
        {ENV: ("absent",)},
    ),
    Case(
        "remove-takes-the-file-and-a-stale-temporary",
        Setup(files={ENV: (OLD, 0o600), TMP: ("x", 0o600), "/state/env/lanes-l1-r1.env": (OLD, 0o600)}),
        lambda: fc.envfile_remove_argv([ENV, "/state/env/lanes-l1-r1.env", "/state/env/never.env"]),
        "",
        0,
        {ENV: ("absent",), TMP: ("absent",), "/state/env/lanes-l1-r1.env": ("absent",)},
    ),
    Case(
        "remove-takes-a-symlink-not-its-target",
        Setup(files={"/victim": (VICTIM, 0o644)}, links={ENV: ("/victim", True)}),
        lambda: fc.envfile_remove_argv([ENV]),
        "",
        0,
        {ENV: ("absent",), "/victim": ("file", "0o644", VICTIM)},
    ),
    Case(
        "remove-in-a-missing-directory-is-fine",
        Setup(),
        lambda: fc.envfile_remove_argv(["/nowhere/env/x.env"]),
        "",
        0,
        {"/nowhere/env/x.env": ("absent",)},
    ),
]


def _rooted(argv: list[str], root: Path) -> list[str]:
    """The same command with its paths under `root` (the sim keeps them as they are)."""
    head = argv[:6]
    return head + [str(root) + p for p in argv[6:]]


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[SimContainerRuntime]:
    rt = SimContainerRuntime("spark9", "127.77.9.2", SimRegistry(), tmp_path / "sim")
    yield rt
    await rt.shutdown()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_the_real_script_and_the_simulated_host_agree(
    case: Case, tmp_path: Path, sim: SimContainerRuntime
) -> None:
    if case.root_only and not ROOT:
        pytest.skip("chown to another uid needs root")
    root = tmp_path / "host"
    root.mkdir()
    case.setup.on_disk(root)
    real = run_real(_rooted(case.argv(), root), case.stdin)
    assert real.returncode == case.status, real.stderr
    assert {p: seen_on_disk(root, p) for p in case.expect} == case.expect

    case.setup.on_sim(sim)
    status, _, err = await sim.execute(case.argv(), case.stdin if sim.wants_stdin(case.argv()) else None)
    assert status == case.status, err
    assert {p: seen_on_sim(sim, p) for p in case.expect} == case.expect
    if case.status == fc.ENVFILE_REFUSED_EXIT:
        assert "refused" in real.stderr and "refused" in err


def test_a_new_directory_is_0700(tmp_path: Path) -> None:
    path = tmp_path / "state" / "env" / "x.env"
    assert run_real(fc.envfile_argv(str(path)), SECRET).returncode == 0
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_no_partial_file_is_ever_visible(tmp_path: Path) -> None:
    """Half the text written and the writer still reading: the path still holds the old file, whole."""
    path = tmp_path / "env" / "x.env"
    path.parent.mkdir(mode=0o700)
    path.write_text(OLD)
    path.chmod(0o644)
    proc = subprocess.Popen(_python_argv(fc.envfile_argv(str(path))), stdin=subprocess.PIPE, text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write("HF_TOKEN=hf_new")
        proc.stdin.flush()
        time.sleep(0.5)
        assert path.read_text() == OLD
        assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o644"
        proc.stdin.write("_secret\n")
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert path.read_text() == SECRET
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.env"]


def test_the_inode_at_the_path_is_new(tmp_path: Path) -> None:
    """The file is replaced, not rewritten: a reader holding the old one keeps the old text."""
    path = tmp_path / "env" / "x.env"
    path.parent.mkdir(mode=0o700)
    path.write_text(OLD)
    with path.open() as held:
        assert run_real(fc.envfile_argv(str(path)), SECRET).returncode == 0
        assert held.read() == OLD
    assert path.read_text() == SECRET


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-I", "-c", fc.ENVFILE_SCRIPT, fc.ENVFILE_MARKER],
        ["python3", "-I", "-c", fc.ENVFILE_SCRIPT, fc.ENVFILE_MARKER, "write"],
        ["python3", "-I", "-c", fc.ENVFILE_SCRIPT, fc.ENVFILE_MARKER, "write", "/a", "/b"],
        ["python3", "-I", "-c", fc.ENVFILE_SCRIPT, fc.ENVFILE_MARKER, "chmod", "/a"],
    ],
)
def test_bad_usage_exits_2(argv: list[str]) -> None:
    assert run_real(argv).returncode == 2


def test_the_commands_read_back() -> None:
    write = fc.envfile_argv("/s/env/a b.env")
    assert write[:4] == ["python3", "-I", "-c", fc.ENVFILE_SCRIPT]
    assert write[4:] == [fc.ENVFILE_MARKER, "write", "/s/env/a b.env"]
    assert fc.read_envfile_argv(write) == fc.EnvFileRequest("write", ("/s/env/a b.env",))
    remove = fc.envfile_remove_argv(["/s/env/a.env", "/s/env/b.env"])
    assert fc.read_envfile_argv(remove) == fc.EnvFileRequest("remove", ("/s/env/a.env", "/s/env/b.env"))
    assert SimContainerRuntime.wants_stdin(write)
    assert not SimContainerRuntime.wants_stdin(remove)
    with pytest.raises(ValueError, match="malformed"):
        fc.read_envfile_argv([*write[:5], "chmod", "/x"])
