"""Hostile state repos through the real CLI: `lanes check` answers 0, 1 or 2, never a traceback.

Hypothesis builds git trees from the example fleet and breaks them: invalid YAML, wrong types, huge
values, unicode and path-like file names, symlinks, duplicate names (`x.yaml` beside `x.yml`), alias
bombs. Bad input must be exit 2 naming the file; nothing here can apply anything (check is pure).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from reconciler.cli.main import app
from tests.support.example import repo_files
from tests.support.properties import examples

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()
BASE = repo_files()
LANES = sorted(p for p in BASE if p.startswith("state/lanes/"))

# Mount lists whose paths climb out of where they seem to point, or are relative.
TRAVERSALS = [
    "[{source: ../../etc, target: /x}]",
    "[{source: /models/../etc, target: /x}]",
    "[{source: /srv/cache, target: /mnt/../../etc/passwd}]",
    "[{source: ./here, target: /x}]",
    "[{source: etc, target: /x}]",
]
HOSTILE_VALUES = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(min_size=0, max_size=40).map(json.dumps),
    st.sampled_from(["[", "{a: [b", "!!python/object:os.system ls", "*undefined_alias", "&a [*a]", "~", "''"]),
    st.sampled_from(TRAVERSALS),
)
NAMES = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="/\x00"), min_size=1, max_size=30),
    st.sampled_from(["..", "CON", "café-ŝparko", "a" * 200, "-rf", ".hidden", "x y"]),
)


def bomb() -> bytes:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    return ("\n".join(lines) + "\n").encode()


@st.composite
def hostile_trees(draw: st.DrawFn) -> tuple[dict[str, bytes], dict[str, str]]:
    files = dict(BASE)
    links: dict[str, str] = {}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["value", "bytes", "name", "dupe", "link", "bomb", "deep", "drop"]))
        target = draw(
            st.sampled_from(
                [*LANES, "state/fleet.yaml", "state/upstreams.yaml", "policies/rules.yaml", "policies/hardware.yaml"]
            )
        )
        if kind == "value":
            key = draw(
                st.sampled_from(
                    [
                        "tp",
                        "port",
                        "hosts",
                        "image",
                        "max_model_len",
                        "env",
                        "mounts",
                        "gpu_memory_utilization",
                        "model",
                        "profiles",
                        "rules",
                        "ssh_port",
                    ]
                )
            )
            files[target] = files.get(target, b"") + f"\n{key}: {draw(HOSTILE_VALUES)}\n".encode()
        elif kind == "bytes":
            files[target] = draw(st.binary(max_size=200))
        elif kind == "name":
            files[f"state/lanes/{draw(NAMES)}.yaml"] = BASE[LANES[0]]
        elif kind == "dupe":
            files[target.removesuffix(".yaml") + ".yml"] = files.get(target, b"")
        elif kind == "link":
            links[f"state/lanes/{draw(st.sampled_from(['evil', 'x']))}.yaml"] = draw(
                st.sampled_from(["../../etc/passwd", "/etc/shadow", LANES[0]])
            )
        elif kind == "bomb":
            files[target] = bomb()
        elif kind == "deep":
            files[target] = ("x: " + "[" * 5000 + "]" * 5000 + "\n").encode()
        else:
            files.pop(target, None)
    return files, links


def make_repo(path: Path, files: dict[str, bytes], links: dict[str, str]) -> None:
    repo = pygit2.init_repository(str(path), bare=True)
    index = pygit2.Index()
    for name, data in files.items():
        index.add(pygit2.IndexEntry(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB))
    for name, target in links.items():
        index.add(pygit2.IndexEntry(name, repo.create_blob(target.encode()), pygit2.enums.FileMode.LINK))
    who = pygit2.Signature("t", "t@example.org")
    repo.create_commit("HEAD", who, who, "hostile", index.write_tree(repo), [])


@settings(
    max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(tree=hostile_trees())
def test_hostile_state_repos_exit_0_1_or_2_never_a_traceback(tree: tuple[dict[str, bytes], dict[str, str]]) -> None:
    files, links = tree
    with tempfile.TemporaryDirectory() as tmp:
        make_repo(Path(tmp) / "repo.git", files, links)
        result = runner.invoke(app, ["check", "--repo", str(Path(tmp) / "repo.git"), "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    out = json.loads(result.output)
    if result.exit_code == 2:
        assert out["ok"] is False and out["error"], out
        assert out.get("file") or "--rev" in out["error"] or "repository" in out["error"], out


@pytest.mark.parametrize("mounts", TRAVERSALS)
def test_a_traversing_or_relative_mount_is_refused_naming_file_line_and_field(mounts: str, tmp_path: Path) -> None:
    files = dict(BASE)
    lane = next(p for p in LANES if b"\nmounts:" not in BASE[p])  # a lane with mounts would get the key twice
    files[lane] = BASE[lane] + f"mounts: {mounts}\n".encode()
    make_repo(tmp_path / "repo.git", files, {})
    result = runner.invoke(app, ["check", "--repo", str(tmp_path / "repo.git"), "--json"])
    assert result.exit_code == 2, result.output
    out = json.loads(result.output)
    assert out["file"] == lane and out["field"] in ("mounts[0].source", "mounts[0].target")
    assert out["line"] == BASE[lane].count(b"\n") + 1
    assert "'.' or '..' segment" in out["error"] or "absolute path" in out["error"]


class Recorder:
    """Stands in for the SSH transport's `run`: any call means lanes tried to touch a host."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def __call__(self, _self: object, host: object, argv: tuple[str, ...], **_kw: object) -> None:
        self.calls.append((str(host), tuple(argv)))
        raise AssertionError("a host command was sent for a state that does not load")


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(tree=hostile_trees())
def test_a_state_that_does_not_load_is_never_applied(
    tree: tuple[dict[str, bytes], dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    monkeypatch.setattr("reconciler.transport.ssh.SSHTransport.run", recorder)
    files, links = tree
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo.git"
        make_repo(repo, files, links)
        check = runner.invoke(app, ["check", "--repo", str(repo), "--json"])
        if check.exit_code != 2:
            return  # loads: applying it is the reconcile tests' business, not this one's
        (Path(tmp) / "known_hosts").write_text("")
        (Path(tmp) / "key").write_text("")
        apply = runner.invoke(
            app,
            [
                "apply",
                "--repo",
                str(repo),
                "--db",
                f"{tmp}/lanes.db",
                "--known-hosts",
                f"{tmp}/known_hosts",
                "--ssh-key",
                f"{tmp}/key",
                "--yes",
                "--json",
            ],
        )
    assert apply.exit_code == 2, apply.output
    assert recorder.calls == []
    assert "Traceback" not in apply.output
