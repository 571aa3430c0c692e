"""The daemon's bare mirror against a real "forge" repository on disk, through both transports."""

from __future__ import annotations

import stat
from pathlib import Path

import pygit2
import pytest

from reconciler.errors import TransientError
from reconciler.source.mirror import Mirror, is_ssh_url
from reconciler.source.notes import NOTES_REF, read_note, write_verdict_note
from tests.source.gitutil import commit, forge_and_clone, push

pytestmark = pytest.mark.timeout(60)

TRANSPORTS = ["libgit2", "git"]


def mirror_of(tmp_path: Path, forge: pygit2.Repository, transport: str, url: str | None = None) -> Mirror:
    return Mirror(url or forge.path, tmp_path / "mirror.git", "main", transport=transport)  # type: ignore[arg-type]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_first_fetch_creates_the_mirror_and_returns_the_head(tmp_path: Path, transport: str) -> None:
    forge, work = forge_and_clone(tmp_path)
    mirror = mirror_of(tmp_path, forge, transport)
    assert mirror.head() is None
    head = mirror.fetch()
    assert head == str(work.head.target) == mirror.head()
    assert mirror.repo.is_bare
    # HEAD of the mirror resolves to the fetched branch, so load_commit(mirror.repo) reads it.
    assert str(mirror.repo.revparse_single("HEAD").id) == head


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_new_commits_and_a_force_pushed_branch_are_followed(tmp_path: Path, transport: str) -> None:
    forge, work = forge_and_clone(tmp_path)
    mirror = mirror_of(tmp_path, forge, transport)
    first = mirror.fetch()
    second = commit(work, {"state/lanes/a.yaml": b"image: two\n"}, "second")
    push(work)
    assert mirror.fetch() == second
    # Rewrite history: a commit on top of the first one, force-pushed over the second.
    rewritten = commit(work, {"state/lanes/a.yaml": b"image: three\n"}, "rewritten", parents=[first])
    with pytest.raises(pygit2.GitError):
        push(work)
    push(work, force=True)
    assert mirror.fetch() == rewritten
    assert mirror.head() == rewritten
    assert str(mirror.repo.revparse_single("refs/heads/main").id) == rewritten


def test_a_file_url_and_a_reopened_mirror_work(tmp_path: Path) -> None:
    forge, work = forge_and_clone(tmp_path)
    mirror = Mirror(f"file://{forge.path}", tmp_path / "m.git")
    assert mirror.fetch() == str(work.head.target)
    again = Mirror(f"file://{forge.path}", tmp_path / "m.git")
    assert again.head() == str(work.head.target)


def test_a_changed_url_is_taken_up(tmp_path: Path) -> None:
    forge, _ = forge_and_clone(tmp_path)
    Mirror("/nonexistent/old.git", tmp_path / "m.git").repo  # noqa: B018
    mirror = Mirror(forge.path, tmp_path / "m.git")
    assert mirror.repo.remotes["origin"].url == forge.path
    assert mirror.fetch()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_unreachable_remote_is_a_transient_error_naming_the_url(tmp_path: Path, transport: str) -> None:
    url = str(tmp_path / "no-such-forge.git")
    mirror = Mirror(url, tmp_path / "m.git", transport=transport)  # type: ignore[arg-type]
    with pytest.raises(TransientError, match="no-such-forge") as info:
        mirror.fetch()
    assert "fetch" in str(info.value)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_missing_branch_is_a_transient_error(tmp_path: Path, transport: str) -> None:
    forge, _ = forge_and_clone(tmp_path)
    mirror = Mirror(forge.path, tmp_path / "m.git", "production", transport=transport)  # type: ignore[arg-type]
    with pytest.raises(TransientError, match="no branch 'production'"):
        mirror.fetch()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_notes_are_pushed_to_the_forge(tmp_path: Path, transport: str) -> None:
    forge, _ = forge_and_clone(tmp_path)
    mirror = mirror_of(tmp_path, forge, transport)
    assert mirror.push_notes() is False  # nothing written yet
    head = mirror.fetch()
    write_verdict_note(mirror.repo, head, {"lanes": [{"lane": "a", "result": "applied", "timings": {"total": 4.6}}]})
    assert mirror.push_notes() is True
    assert "lanes: applied a: healthy in 4.6 s" in (read_note(forge, head) or "")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rejected_notes_push_goes_on_top_of_the_remote_tip_with_ours_only(tmp_path: Path, transport: str) -> None:
    forge, work = forge_and_clone(tmp_path)
    first = str(work.head.target)
    second = commit(work, {"state/lanes/a.yaml": b"image: two\n"}, "second")
    push(work)
    mirror = mirror_of(tmp_path, forge, transport)
    mirror.fetch()
    # Another daemon (or a person) pushed notes first: one on each commit.
    other = pygit2.Signature("other", "other@example.org")
    forge.create_note("someone else on first\n", other, other, first, NOTES_REF)
    forge.create_note("someone else on second\n", other, other, second, NOTES_REF)
    write_verdict_note(mirror.repo, second, {"lanes": [{"lane": "a", "result": "denied", "rule": "memory-budget"}]})
    assert mirror.push_notes() is True
    # The notes ref is the daemon's record (issue 24): what someone else pushed there is not taken into it.
    on_second = read_note(forge, second) or ""
    assert "someone else on second" not in on_second
    assert "lanes: denied a: memory-budget" in on_second
    assert read_note(forge, first) is None
    # The forge's notes history was extended, not overwritten: its old tip is an ancestor.
    tip = forge.references[NOTES_REF].target
    assert len(forge[tip].parents) == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_fetch_keeps_notes_written_here_and_takes_no_remote_text(tmp_path: Path, transport: str) -> None:
    forge, work = forge_and_clone(tmp_path)
    mirror = mirror_of(tmp_path, forge, transport)
    head = mirror.fetch()
    write_verdict_note(mirror.repo, head, {"lanes": [{"lane": "a", "result": "failed", "error": "boom"}]})
    other = pygit2.Signature("other", "other@example.org")
    forge.create_note("remote text\n", other, other, head, NOTES_REF)
    commit(work, {"state/lanes/a.yaml": b"image: two\n"}, "second")
    push(work)
    mirror.fetch()
    text = read_note(mirror.repo, head) or ""
    assert "lanes: failed a: boom" in text and "remote text" not in text


def test_a_notes_push_refused_by_a_hook_gives_up_after_the_retries(tmp_path: Path) -> None:
    forge, _ = forge_and_clone(tmp_path)
    hook = Path(forge.path) / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'notes are read-only here' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    mirror = mirror_of(tmp_path, forge, "git")
    head = mirror.fetch()
    write_verdict_note(mirror.repo, head, {"lanes": []})
    with pytest.raises(TransientError, match="still refused after 3 retries"):
        mirror.push_notes()


def test_ssh_remotes_go_through_openssh_with_the_pinned_known_hosts(tmp_path: Path) -> None:
    key, known = tmp_path / "id_ed25519", tmp_path / "known hosts"
    mirror = Mirror("ssh://git@forge.lab:2222/fleet/state.git", tmp_path / "m.git", ssh_key=key, known_hosts=known)
    assert mirror.transport == "git"
    command = mirror.ssh_command()
    assert "StrictHostKeyChecking=yes" in command and "BatchMode=yes" in command
    assert f"'UserKnownHostsFile={known}'" in command  # quoted: git runs it through a shell
    assert f"-i {key}" in command and "IdentitiesOnly=yes" in command
    assert Mirror("git@forge.lab:fleet/state.git", tmp_path / "n.git").transport == "git"
    assert Mirror(str(tmp_path), tmp_path / "o.git").transport == "libgit2"


@pytest.mark.parametrize(
    ("url", "ssh"),
    [
        ("ssh://git@host/x.git", True),
        ("git@github.com:org/repo.git", True),
        ("https://github.com/org/repo.git", False),
        ("file:///srv/git/state.git", False),
        ("/srv/git/state.git", False),
    ],
)
def test_is_ssh_url(url: str, ssh: bool) -> None:
    assert is_ssh_url(url) is ssh
