"""Deterministic benchmark prompts, sized by the served model's own token count.

A prompt of "2048 tokens" only means something in the tokenizer of the model
that serves it, and a benchmark client rarely has that tokenizer (nor should
it guess with another model's). So the size is learned from the server: a
few probe requests report `usage.prompt_tokens` for prompts of known word
counts, a straight line (tokens = fixed + per_word x words) is fitted
through them, and each target size is then checked and corrected against
the server once more (`refine`). The fixed term is what the server adds to
every request (BOS, a chat template), so the prompt *as counted by the
server* has the target size, as llama-benchy's prompt adaptation does.

Words come from a seeded generator over a plain English vocabulary: two runs
of one profile send the same text, and every request of a run gets its own
stream of words (its `salt`) so no request is a prefix-cache hit on another.
Pure: the probing itself is done by the runner.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

_WORDS = """
the of and to in is was for on that with as by at from his it an were are which this be
or has had not but first one their its new after who they have her she two been other
when there all during into school time may years more most only over city some world
would where later up such used many can state about national out known university united
then made these team under well between through season him both while also river year
three four five six seven eight nine ten hundred thousand north south east west early
long small large great high low old young good best better country water light music
house road bridge station market garden window table letter paper story history record
village valley mountain island harbour forest field stone iron silver golden winter
summer spring autumn morning evening night day week month century family friend people
children teacher doctor farmer sailor soldier king queen prince church castle tower wall
gate door street square library museum theatre hospital office factory mill engine train
ship boat wheel machine signal number word language voice song dance game play reading
writing counting drawing building walking running sailing fishing hunting travelling
working learning teaching thinking speaking listening watching waiting carefully quickly
slowly quietly loudly gently simply clearly nearly almost always never often sometimes
usually again together alone across along around behind below beside beyond inside
outside toward within without against among before since until upon
"""

VOCABULARY: tuple[str, ...] = tuple(dict.fromkeys(_WORDS.split()))
"""Common words: real tokenizers split them like ordinary text, unlike random characters."""


def run_prefix(count: int = 4) -> tuple[str, ...]:
    """Words only this run starts its prompts with, so no server serves them from its prefix cache.

    vLLM and SGLang cache prompt prefixes across requests; a second run of one
    profile against the same server would otherwise find every prompt cached
    and report prefill rates of a cache. 4 words of 250 make 3.9e9 prefixes;
    the text after them stays the seed's.
    """
    rng = random.SystemRandom()
    return tuple(rng.choice(VOCABULARY) for _ in range(count))


def words(seed: int, salt: str, count: int) -> list[str]:
    """`count` words, the same for the same (seed, salt) on every machine and run."""
    # Not for secrets: a reproducible stream. str seeds hash with SHA-512, so stable across runs and machines.
    rng = random.Random(f"lanes-bench:{seed}:{salt}")  # noqa: S311
    return rng.choices(VOCABULARY, k=count)


@dataclass(frozen=True)
class TokenFit:
    """How the server counts: tokens = fixed + per_word x words."""

    per_word: float
    fixed: float

    def words_for(self, tokens: int) -> int:
        """Words of generated text for a request the server counts as `tokens` (at least 1)."""
        return max(1, round((tokens - self.fixed) / self.per_word))

    def tokens_for(self, word_count: int) -> float:
        return self.fixed + self.per_word * word_count


def fit(samples: Sequence[tuple[int, int]]) -> TokenFit:
    """Least-squares line through (words, server tokens) samples; one sample gives a ratio."""
    if not samples:
        raise ValueError("no samples to fit")
    if len({w for w, _ in samples}) == 1:
        w, t = samples[0]
        return TokenFit(per_word=max(t / max(w, 1), 1e-6), fixed=0.0)
    n = len(samples)
    mean_w = sum(w for w, _ in samples) / n
    mean_t = sum(t for _, t in samples) / n
    cov = sum((w - mean_w) * (t - mean_t) for w, t in samples)
    var = sum((w - mean_w) ** 2 for w, _ in samples)
    slope = max(cov / var, 1e-6)
    return TokenFit(per_word=slope, fixed=mean_t - slope * mean_w)


def refine(word_count: int, got_tokens: int, target_tokens: int, per_word: float) -> int:
    """The next word count to try after `word_count` words were counted as `got_tokens`."""
    if got_tokens == target_tokens:
        return word_count
    step = round((target_tokens - got_tokens) / per_word)
    if step == 0:  # closer than one word's worth: move by one word toward the target
        step = 1 if target_tokens > got_tokens else -1
    return max(1, word_count + step)


CONTEXT_LOAD_USER_MESSAGE = "."
"""The user turn under a context sent alone: vLLM refuses empty user content (llama-benchy 0.4.0 client.py)."""


@dataclass(frozen=True)
class Prompt:
    """One request's text: `context` (the depth) before `prompt` (the measured prompt)."""

    context: str
    prompt: str
    expected_tokens: int
    """What the server should count (pp + depth), for the record and a sanity check."""

    def completion_text(self) -> str:
        return f"{self.context} {self.prompt}" if self.context and self.prompt else self.context or self.prompt

    def chat_messages(self) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.context}] if self.context else []
        return [*messages, {"role": "user", "content": self.prompt or CONTEXT_LOAD_USER_MESSAGE}]

    def context_only(self, depth: int) -> Prompt:
        """The context alone, `depth` tokens: the prefix-cached mode's first request, which leaves it cached.

        llama-benchy sends it as the system message under a one-character user turn
        (runner.py `BenchmarkRunner.run_suite`, "Phase 1: Context Load"; client.py
        `CONTEXT_LOAD_USER_MESSAGE`); on /v1/completions it is the context text alone.
        """
        return Prompt(context=self.context, prompt="", expected_tokens=depth)


def build(seed: int, salt: str, total_words: int, pp: int, depth: int, prefix: Sequence[str] = ()) -> Prompt:
    """A prompt of `total_words` words; the depth's share of them goes to the context.

    `total_words` is what sizing found for pp + depth tokens; it is split in
    proportion so the context holds about `depth` tokens and the prompt the rest.
    `prefix` words (a run's own, see `run_prefix`) come first and count in.
    """
    text = [*prefix[:total_words], *words(seed, salt, max(total_words - len(prefix), 0))]
    context_words = round(total_words * depth / (pp + depth)) if depth else 0
    context_words = min(context_words, total_words - 1)
    return Prompt(
        context=" ".join(text[:context_words]),
        prompt=" ".join(text[context_words:]),
        expected_tokens=pp + depth,
    )
