"""Whether a git build contains a fix, answered from the mirror the git-head watch keeps (real bare repos)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pygit2
import pytest

from reconciler.policy import evaluate
from reconciler.policy.ancestry import FixQuestion
from reconciler.spec.policyfiles import KnownIssuesFile
from reconciler.spec.upstream import GitHead, UpstreamsFile
from reconciler.upstream.ancestry import answer_fix_questions, fix_ancestry, repo_key
from reconciler.upstream.base import PollSettings
from reconciler.upstream.githead import poll_git_head
from reconciler.upstream.store import UpstreamStore
from tests.policy.test_known_issues import POLICIES, glm
from tests.support.upstreamgit import commit
from tests.upstream.conftest import VirtualClock

pytestmark = pytest.mark.timeout(30)


@dataclasses.dataclass
class Upstream:
    source: GitHead
    before: str
    fix: str
    after: str


@pytest.fixture
async def upstream(tmp_path: Path, store: UpstreamStore, settings: PollSettings, vclock: VirtualClock) -> Upstream:
    """vLLM main as four commits (base, a build before the fix, the fix, a build after it), polled once."""
    repo = pygit2.init_repository(str(tmp_path / "vllm.git"), bare=True, initial_head="main")
    commit(repo, "[Core] base", 1_792_000_000)
    before = commit(repo, "[Kernel] b12x MoE for SM121", 1_792_000_100)
    fix = commit(repo, "[Bugfix] NVFP4 MoE scales under EP", 1_792_000_200)
    after = commit(repo, "[Docs] DCP on GB10", 1_792_000_300)
    source = GitHead(kind="git-head", name="vllm-main", url=repo.path)
    assert (await poll_git_head(source, store, settings, vclock.clock())).status == "new"
    return Upstream(source, before, fix, after)


def test_repositories_are_matched_by_owner_and_name_however_written() -> None:
    for written in (
        "vllm-project/vllm",
        "https://github.com/vllm-project/vllm.git",
        "https://github.com/vllm-project/vllm/",
        "git@github.com:vllm-project/vllm.git",
        "ssh://git@github.com/vllm-project/vllm",
        "/srv/mirrors/vllm-project/vllm.git",
    ):
        assert repo_key(written) == "vllm-project/vllm", written


async def test_the_mirror_answers_whether_the_fix_is_an_ancestor_of_the_build(
    upstream: Upstream, settings: PollSettings
) -> None:
    repo, fix = upstream.source.url, upstream.fix
    questions = [
        FixQuestion(repo, fix, upstream.after[:9]),
        FixQuestion(repo, fix, upstream.before[:9]),
        FixQuestion(repo, fix, fix[:10]),
        FixQuestion(repo, fix, "deadbeef1"),
        FixQuestion("sgl-project/sglang", fix, upstream.after[:9]),
    ]
    answers = answer_fix_questions(questions, [upstream.source], settings.data_dir)
    assert [answers[q].contains_fix for q in questions] == [True, False, True, None, None]
    assert answers[questions[0]].how == "by ancestry in the mirror of 'vllm-main' (main)"
    assert "commit deadbeef1 is not in the mirror of 'vllm-main'" in answers[questions[3]].how
    assert answers[questions[4]].how == "no git-head source in state/upstreams.yaml watches sgl-project/sglang"


async def test_a_source_that_was_never_polled_has_no_mirror_to_ask(tmp_path: Path, upstream: Upstream) -> None:
    question = FixQuestion(upstream.source.url, upstream.fix, upstream.after[:9])
    answer = answer_fix_questions([question], [upstream.source], tmp_path / "elsewhere")[question]
    assert answer.contains_fix is None and "has no mirror under" in answer.how


async def test_evaluate_with_the_mirror_clears_a_build_that_has_the_fix(
    upstream: Upstream, settings: PollSettings
) -> None:
    entry = next(i for i in POLICIES.known_issues.issues if i.id == "vllm-59042-moe-ep-corruption")
    entry = entry.model_copy(update={"fixed_in_commit": upstream.fix, "repo": upstream.source.url})
    policies = dataclasses.replace(POLICIES, known_issues=KnownIssuesFile(issues=(entry,)))

    def verdict(engine_version: str) -> list[str]:
        desired = dataclasses.replace(
            glm(engine_version=engine_version, ep=4), upstreams=UpstreamsFile(sources=(upstream.source,))
        )
        answers = fix_ancestry(desired, policies.known_issues, settings.data_dir)
        found = evaluate(desired, policies, fix_ancestry=answers).violations
        return [v.severity for v in found if v.rule == "known-issues"]

    assert verdict(f"0.31.1rc1.dev3+g{upstream.after[:9]}") == []  # in '<0.32.0', but the fix is in
    assert verdict(f"0.31.1rc1.dev1+g{upstream.before[:9]}") == ["deny"]
    assert verdict(f"0.32.0rc1.dev1+g{upstream.before[:9]}") == ["deny"]  # out of '<0.32.0' by PEP 440 alone
