"""The stand-in reads its decoding from the engine's own flags, as vLLM and SGLang spell them."""

from __future__ import annotations

import pytest

from reconciler.sim.engineargs import Behaviour
from reconciler.sim.standin_decoding import Decoding, PrefixCache, chunk_schedule, decoding_from_argv

pytestmark = pytest.mark.timeout(10)

VLLM = ["vllm", "serve", "/models/m", "--port", "8000"]
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/m", "--port", "30000"]


@pytest.mark.parametrize(
    ("flags", "per_step"),
    [
        ([], 1),
        (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}'], 4),
        (['--speculative-config={"method":"eagle3","num_speculative_tokens":5}'], 6),
        (["--speculative_config", '{"method": "ngram", "num_speculative_tokens": 2}'], 3),
        # vLLM's dotted form, each field a flag of its own.
        (["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "2"], 3),
        (["--speculative-config.method=mtp", "--speculative-config.num_speculative_tokens=7"], 8),
        (["--speculative-config.method", "mtp"], 2),  # no count: the MTP head's own, one for DeepSeek
        (["--speculative-config", "not json"], 1),
    ],
)
def test_vllm_speculative_config(flags: list[str], per_step: int) -> None:
    assert decoding_from_argv([*VLLM, *flags]).tokens_per_step == per_step


@pytest.mark.parametrize(
    ("flags", "per_step"),
    [
        ([], 1),
        (["--speculative-num-steps", "3"], 1),  # steps without an algorithm: no speculation
        (["--speculative-algorithm", "NEXTN"], 4),  # SGLang's choice for DeepSeek: 3 steps
        (["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"], 6),
        (
            ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4"],
            4,
        ),
        (
            ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5", "--speculative-num-draft-tokens", "3"],
            3,
        ),
    ],
)
def test_sglang_speculative_flags(flags: list[str], per_step: int) -> None:
    assert decoding_from_argv([*SGLANG, *flags]).tokens_per_step == per_step


def test_prefix_caching_and_its_block_size_per_engine() -> None:
    assert decoding_from_argv(VLLM) == Decoding(tokens_per_step=1, prefix_caching=True, block_size=16)
    assert decoding_from_argv([*VLLM, "--no-enable-prefix-caching"]).prefix_caching is False
    assert decoding_from_argv([*VLLM, "--enable-prefix-caching", "--block-size", "32"]).block_size == 32
    assert decoding_from_argv(SGLANG) == Decoding(tokens_per_step=1, prefix_caching=True, block_size=1)
    assert decoding_from_argv([*SGLANG, "--disable-radix-cache"]).prefix_caching is False
    assert decoding_from_argv([*SGLANG, "--page-size", "64"]).block_size == 64


def test_chunks_are_due_with_their_last_token() -> None:
    behaviour = Behaviour(pp_tps=100, tg_tps=200)
    # 30 prompt tokens, 10 of them cached: 0.2 s prefill; then a token every 5 ms, four to a chunk.
    chunks = chunk_schedule(behaviour, 30, 10, Decoding(tokens_per_step=4), cached_tokens=10)
    assert [size for _, size in chunks] == [1, 4, 4, 1]
    assert [due for due, _ in chunks] == pytest.approx([0.2, 0.2 + 4 * 0.005, 0.2 + 8 * 0.005, 0.2 + 9 * 0.005])
    plain = chunk_schedule(behaviour, 30, 10)
    assert [size for _, size in plain] == [1] * 10 and plain[-1][0] == chunks[-1][0] + 0.1  # nothing cached
    assert chunk_schedule(behaviour, 30, 0) == []


def test_the_prefix_cache_finds_whole_blocks_of_a_prefix_and_never_the_last_token() -> None:
    cache = PrefixCache(block_size=4)
    context = [f"w{i}" for i in range(10)]
    assert cache.cached(context) == 0
    cache.insert(context)  # two full blocks kept; the last two words are no block
    assert cache.cached([*context, "and", "more"]) == 8
    assert cache.cached(context[:8]) == 7  # all cached, but the last token is prefilled for its logits
    assert cache.cached(["other", *context]) == 0  # a block counts only after the blocks before it
    assert cache.cached([*context[:4], "x", *context[5:]]) == 4


def test_the_prefix_cache_forgets_the_least_recently_used_beyond_its_capacity() -> None:
    cache = PrefixCache(block_size=1, capacity=3)
    cache.insert(["a", "b", "c"])
    assert cache.cached(["a", "b", "c", "d"]) == 3
    cache.insert(["x"])
    assert cache.cached(["x", "y"]) == 1 and cache.cached(["a", "b", "c", "d"]) == 0  # "a" went first
