"""Picking the engine's own reason out of a rank's log tail: error lines kept, noise skipped, all of it bounded."""

from __future__ import annotations

from reconciler.facts.enginelog import MAX_LINE, MAX_LINES, engine_words, rank_reason, with_engine_words

ARGPARSE = (
    "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
    "            [--enable-prefix-caching | --no-enable-prefix-caching]\n"
    "vllm: error: unrecognized arguments: --enable-prefix-cachng\n"
)
TRACEBACK = """INFO 01-02 03:04:05 [api_server.py:1] vLLM API server version 0.32.0
Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00s/it]
Traceback (most recent call last):
  File "/usr/local/bin/vllm", line 8, in <module>
    sys.exit(main())
  File "/usr/lib/python3/dist-packages/vllm/worker.py", line 12, in load
    raise ValueError(msg)
ValueError: The model's max seq len (262144) is larger than the maximum number of tokens in KV cache (90112).
"""


def test_argparse_refusal_is_the_one_line_kept() -> None:
    assert rank_reason(ARGPARSE) == ["vllm: error: unrecognized arguments: --enable-prefix-cachng"]


def test_a_traceback_gives_its_exception_line_not_its_frames() -> None:
    assert rank_reason(TRACEBACK) == [TRACEBACK.splitlines()[-1]]


def test_logging_errors_and_timestamps_ansi_and_control_bytes() -> None:
    log = (
        "2026-12-02T03:04:05.123456789Z \x1b[31mERROR 12-02 03:04:05 [core.py:9] EngineCore failed to start.\x1b[0m\n"
        "2026-12-02T03:04:06Z RuntimeError: CUDA error: out of memory\x07\n"
    )
    assert rank_reason(log) == [
        "ERROR 12-02 03:04:05 [core.py:9] EngineCore failed to start.",
        "RuntimeError: CUDA error: out of memory",
    ]


def test_nothing_that_looks_like_an_error_gives_none() -> None:
    assert engine_words({"lanes-x-r0@h": "loading model\nmodel loaded; ready\n"}) is None
    assert engine_words({}) is None and engine_words(None) is None
    assert with_engine_words("gate failed", {"r0@h": "fine\n"}) == "gate failed"


def test_ranks_saying_the_same_are_quoted_once_and_everything_is_bounded() -> None:
    logs = {f"lanes-x-r{i}@dgx{i}": ARGPARSE for i in range(3)}
    assert engine_words(logs) == "vllm: error: unrecognized arguments: --enable-prefix-cachng"
    flood = "".join(f"ValueError: bad value {i} " + "x" * 5000 + "\n" for i in range(10_000))
    kept = rank_reason(flood)
    assert len(kept) == MAX_LINES and all(len(line) <= MAX_LINE for line in kept)
    assert kept[-1].startswith("ValueError: bad value 9999 ")


def test_the_words_follow_the_error_and_are_not_repeated() -> None:
    error = "readiness gate failed at stage 'port': a rank exited while waiting for port"
    said = with_engine_words(error, {"r0@h": ARGPARSE})
    assert said == f"{error}; engine: vllm: error: unrecognized arguments: --enable-prefix-cachng"
    assert with_engine_words(said, {"r0@h": ARGPARSE}) == said
