"""Prompts are sized by the server's own token count (usage.prompt_tokens), not guessed."""

from __future__ import annotations

import json

import httpx
import pytest

from reconciler.bench import prompts
from reconciler.bench.runner import run_profile
from reconciler.errors import PermanentError
from reconciler.spec.bench import BenchProfile

from . import fakeengine

pytestmark = pytest.mark.timeout(30)


def test_words_are_deterministic_per_seed_and_salt() -> None:
    assert prompts.words(7, "a", 50) == prompts.words(7, "a", 50)
    assert prompts.words(7, "a", 50) != prompts.words(7, "b", 50)
    assert prompts.words(7, "a", 50) != prompts.words(8, "a", 50)
    assert all(w in prompts.VOCABULARY for w in prompts.words(1, "x", 500))


def test_fit_recovers_a_line_and_refine_moves_toward_the_target() -> None:
    line = prompts.fit([(16, 3 + 2 * 16), (256, 3 + 2 * 256)])
    assert line.per_word == pytest.approx(2.0) and line.fixed == pytest.approx(3.0)
    assert line.words_for(2051) == 1024
    assert prompts.fit([(100, 130)]).words_for(1300) == 1000
    assert prompts.refine(1000, 2040, 2048, 2.0) == 1004
    assert prompts.refine(1000, 2047, 2048, 2.0) == 1001  # under a word away: one word
    assert prompts.refine(1000, 2048, 2048, 2.0) == 1000
    with pytest.raises(ValueError, match="no samples"):
        prompts.fit([])


def test_build_puts_the_depth_share_of_words_in_the_context() -> None:
    p = prompts.build(1, "s", 300, pp=100, depth=200)
    assert len(p.context.split()) == 200 and len(p.prompt.split()) == 100
    assert p.expected_tokens == 300
    assert p.completion_text().split() == prompts.words(1, "s", 300)
    assert [m["role"] for m in p.chat_messages()] == ["system", "user"]
    flat = prompts.build(1, "s", 10, pp=10, depth=0)
    assert flat.context == "" and [m["role"] for m in flat.chat_messages()] == ["user"]


@pytest.mark.parametrize("api", ["completions", "chat"])
async def test_prompts_are_sized_to_the_servers_count(api: str) -> None:
    profile = BenchProfile(
        name="t",
        pp=(512, 2048),
        tg=(4,),
        depth=(0, 1024),
        repetitions=2,
        warmup=0,
        api=api,
    )
    run = await run_profile(
        profile, url="http://fake.invalid/v1", model=fakeengine.MODEL, transport=fakeengine.transport()
    )
    # Words cost 1-3 tokens here plus a template, so a word count is never the token count.
    assert run.fit.per_word > 1.05 and run.fit.fixed > 2
    for (pp, depth), got in run.sized_tokens.items():
        target = pp + depth
        assert abs(got - target) <= max(1, 0.005 * target), (pp, depth, got)
        assert run.sized_words[(pp, depth)] < target  # fewer words than tokens: sized, not guessed
    for row in run.rows:
        target = row["prompt_size"] + row["context_size"]
        # Every request has its own words, so its count varies a little around the target.
        assert row["prompt_tokens"]["mean"] == pytest.approx(target, rel=0.02)
        assert row["completion_tokens"]["values"] == [4.0, 4.0]


async def test_exact_counting_gives_exact_sizes() -> None:
    profile = BenchProfile(name="t", pp=(300,), tg=(2,), depth=(0, 700), repetitions=1, warmup=0)
    run = await run_profile(
        profile,
        url="http://fake.invalid",
        model=fakeengine.MODEL,
        transport=fakeengine.transport(count=lambda t: 2 * len(t.split()), fixed=1),
    )
    # Two tokens a word: 1000 tokens cannot be hit exactly (the template adds one), 999 or 1001 can.
    assert run.sized_tokens[(300, 0)] in (299, 301) and run.sized_tokens[(300, 700)] in (999, 1001)
    assert run.fit.per_word == pytest.approx(2.0) and run.fit.fixed == pytest.approx(1.0)


async def test_a_server_that_does_not_serve_the_model_is_refused() -> None:
    profile = BenchProfile(name="t", pp=(8,), tg=(2,), repetitions=1, warmup=0)
    with pytest.raises(PermanentError, match="does not serve 'other'"):
        await run_profile(profile, url="http://fake.invalid", model="other", transport=fakeengine.transport())


async def test_a_server_without_usage_cannot_size_prompts() -> None:
    profile = BenchProfile(name="t", pp=(8,), tg=(2,), repetitions=1, warmup=0)
    with pytest.raises(PermanentError, match="HTTP 400"):
        await run_profile(
            profile, url="http://fake.invalid", model=fakeengine.MODEL, transport=fakeengine.transport(status=400)
        )


async def test_each_run_starts_its_prompts_with_its_own_words_unless_told_not_to() -> None:
    sent: list[str] = []
    inner = fakeengine.handler()

    def handle(request: httpx.Request) -> httpx.Response:
        prompt = json.loads(request.content)["prompt"] if request.method == "POST" else "hello"
        if prompt != "hello":  # the latency probe is one fixed word
            sent.append(prompt)
        return inner(request)

    async def prompts_of(profile: BenchProfile, prefix: tuple[str, ...] | None = None) -> list[str]:
        sent.clear()
        await run_profile(
            profile, url="http://x", model=fakeengine.MODEL, transport=httpx.MockTransport(handle), prefix=prefix
        )
        return list(sent)

    profile = BenchProfile(name="t", pp=(64,), tg=(2,), concurrency=(2,), repetitions=2, warmup=1)
    first, second = await prompts_of(profile), await prompts_of(profile)
    assert first != second  # a server's prefix cache cannot serve the second run
    assert {tuple(p.split()[:4]) for p in first} == {tuple(first[0].split()[:4])}  # one prefix per run
    measured = first[-4:]  # the measured batches: every request has its own words
    assert len({" ".join(p.split()[4:12]) for p in measured}) == 4
    # The text after the run's words is the seed's: the same in both runs. Concurrent requests may arrive
    # in either order, and each run's size correction may trim the tail by a word: compare sorted heads.
    assert sorted(p.split()[4:40] for p in first[-4:]) == sorted(p.split()[4:40] for p in second[-4:])
    fixed = profile.model_copy(update={"fresh_prefix": False})
    assert await prompts_of(fixed) == await prompts_of(fixed)
    assert (await prompts_of(profile, ("alpha", "beta")))[-1].startswith("alpha beta ")
