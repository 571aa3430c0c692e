"""Reading an engine's memory flags off a lane's args, as the engines' own parsers would."""

from __future__ import annotations

import pytest

from reconciler.policy.engine_memory import SEMANTICS, arg_value, human_int, speculation, utilization

pytestmark = pytest.mark.timeout(10)


def test_arg_value_takes_both_spellings_and_the_last_one_wins() -> None:
    args = ("--max-total-tokens", "100", "--x", "--max-total-tokens=200")
    assert arg_value(args, "--max-total-tokens") == "200"
    assert arg_value(("--max-total-tokens",), "--max-total-tokens") is None  # no value: argparse refuses
    assert arg_value(("--max-total-tokens-x", "1"), "--max-total-tokens") is None


@pytest.mark.parametrize(
    ("text", "value"),
    # vllm/utils/argparse_utils.py human_readable_int: lower case powers of 10, upper case powers of 2.
    [("1k", 1000), ("1K", 1024), ("25.6k", 25600), ("2G", 2 * 2**30), ("3g", 3 * 10**9), ("15032385536", 15032385536)],
)
def test_human_int_reads_as_vllm_does(text: str, value: int) -> None:
    assert human_int(text) == value


@pytest.mark.parametrize("text", ["", "1.5", "1.5G", "1x", "G", "-1"])
def test_human_int_refuses_what_vllm_refuses_or_lanes_cannot_budget(text: str) -> None:
    # vLLM refuses all but "-1" (int() takes it); a negative size is no KV cache lanes can count.
    assert human_int(text) is None


def test_utilization_from_args_over_the_field_but_not_for_generic_or_nonsense() -> None:
    assert utilization(("--mem-fraction-static", "0.7"), SEMANTICS["sglang"], 0.8) == 0.7
    assert utilization(("--gpu-memory-utilization", "0.7"), SEMANTICS["sglang"], 0.8) == 0.8  # not SGLang's flag
    assert utilization(("--gpu-memory-utilization", "abc"), SEMANTICS["vllm"], 0.8) == 0.8
    assert utilization(("--gpu-memory-utilization", "1.5"), SEMANTICS["vllm"], 0.8) == 0.8
    assert utilization(("gpu_memory_utilization", "0.1"), SEMANTICS["generic"], 0.8) == 0.8


@pytest.mark.parametrize(
    ("engine", "args", "family"),
    [
        ("vllm", ("--speculative-config", '{"method": "mtp"}'), "mtp"),
        ("vllm", ("--speculative-config", '{"method": "deepseek_mtp"}'), "mtp"),
        ("vllm", ("--speculative-config", '{"method": "eagle3", "model": "o/h"}'), "eagle"),
        ("vllm", ("--speculative-config", '{"method": "dflash", "model": "o/h"}'), "eagle"),
        ("vllm", ("--speculative-config", '{"method": "ngram"}'), "ngram"),
        ("vllm", ("--speculative-config", '{"model": "o/small"}'), "draft_model"),
        ("vllm", ("--speculative-config", "not json"), "unknown"),
        ("sglang", ("--speculative-algorithm", "NEXTN"), "mtp"),
        ("sglang", ("--speculative-algorithm", "EAGLE"), "mtp"),  # no draft path: the model's own MTP layers
        ("sglang", ("--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "o/h"), "eagle"),
        ("sglang", ("--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "o/s"), "draft_model"),
        ("sglang", ("--speculative-algorithm", "NGRAM"), "ngram"),
    ],
)
def test_speculation_family_per_engine(engine: str, args: tuple[str, ...], family: str) -> None:
    spec = speculation(engine, args)
    assert spec is not None and spec.family == family


def test_no_speculation_without_its_flags() -> None:
    assert speculation("vllm", ("--trust-remote-code",)) is None
    assert speculation("sglang", ()) is None
