"""engines/argvfold.py: lines that differ only in values argparse takes as they come are parsed once.

What is checked: argparse runs once for many lanes' lines that differ in ports and names; each engine
release still judges with its own parser; a value argparse would say something about (a bad number, a
value outside the choices, one that looks like an option, one after `--`) is never folded away, and a
line judged through the folded answers gets the verdict argparse gives it alone (a property over the
shipped tables).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.engines import flags
from reconciler.engines.argvfold import PLACEHOLDER, fold, foldable
from reconciler.engines.flags import ArgvError, FlagTable, check_argv, load_table, tables
from tests.support.properties import examples

from .test_flags import _doc, _vllm

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    flags._VERDICTS.clear()
    flags._OUTCOMES.clear()
    yield
    flags._VERDICTS.clear()
    flags._OUTCOMES.clear()


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The lines argparse itself was run over."""
    seen: list[list[str]] = []
    real = flags._Parser.parse_known_args

    def counting(self: flags._Parser, args: Any = None, namespace: Any = None) -> Any:
        seen.append(list(args))
        return real(self, args, namespace)

    monkeypatch.setattr(flags._Parser, "parse_known_args", counting)
    return seen


def _rank(i: int) -> list[str]:
    return ["/m", "--served-model-name", f"small-{i}", "--port", str(8000 + i), "--max-model-len", "16384"]


def test_lines_differing_in_ports_and_names_are_parsed_once(parses: list[list[str]]) -> None:
    table = _vllm_with_port()
    assert all(check_argv(table, _rank(i)) is None for i in range(200))
    assert len(parses) == 1


def test_the_same_line_under_two_releases_gets_each_releases_verdict(parses: list[list[str]]) -> None:
    # One line, two releases: the newer has --stream-output, the older (here) does not.
    newer = load_table(_doc(version="0.5.22"))
    older_doc = _doc(version="0.5.19")
    older_doc["flags"] = [f for f in older_doc["flags"] if f["flags"] != ["--stream-output"]]
    older = load_table(older_doc)
    line = ["--model-path", "/m", "--tp-size", "4", "--stream-output"]
    assert check_argv(newer, line) is None
    refused = check_argv(older, line)
    assert refused is not None and refused.message == "unrecognized arguments: --stream-output"
    assert (refused.flag, refused.index) == ("--stream-output", 4)
    assert check_argv(older, ["--model-path", "/n", "--tp-size", "2", "--stream-output"]) == refused
    assert check_argv(newer, ["--model-path", "/n", "--tp-size", "2", "--stream-output"]) is None
    assert len(parses) == 2


TP = "argument --tp-size/--tensor-parallel-size"
EVENTS = "argument --kv-events-config"


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        (["--tp-size", "4"], ["--tp-size", "four"], f"{TP}: invalid int value: 'four'"),
        (["--tp-size=4"], ["--tp-size=four"], f"{TP}: invalid int value: 'four'"),
        (
            ["--kv-cache-dtype", "nvfp4"],
            ["--kv-cache-dtype", "fp9"],
            "argument --kv-cache-dtype: invalid choice: 'fp9' (choose from 'auto', 'fp8_e4m3', 'nvfp4')",
        ),
        (["--kv-events-config", "a"], ["--kv-events-config", "-a"], f"{EVENTS}: expected one argument"),
    ],
)
def test_a_value_argparse_would_speak_of_is_judged_as_written(
    parses: list[list[str]], good: list[str], bad: list[str], message: str
) -> None:
    table = load_table(_doc())
    assert check_argv(table, ["--model-path", "/m", *good]) is None
    error = check_argv(table, ["--model-path", "/m", *bad])
    assert error is not None and error.message == message
    assert len(parses) == 2


def test_unrecognized_words_are_the_lines_own(parses: list[list[str]]) -> None:
    table = load_table(_doc())
    first = check_argv(table, ["--model-path", "/m", "--tp-size", "2", "--bogus", "a"])
    second = check_argv(table, ["--model-path", "/n", "--tp-size", "4", "--bogus", "b"])
    assert first is not None and first.message == "unrecognized arguments: --bogus a"
    assert second is not None and second.message == "unrecognized arguments: --bogus b"
    # The answer for the first line's folded form is not used for the second: its words differ where
    # argparse did not consume them (after an unknown flag).
    assert len(parses) == 2


def test_a_word_past_what_an_option_takes_is_its_own() -> None:
    # --tp-size takes one value: the word after it is an extra, named as written; after `=` a list
    # option (--served-model-name, nargs +) has taken its one value and the next word is an extra too.
    table = load_table(_doc())
    for extra in ("5", "6"):
        error = check_argv(table, ["--model-path", "/m", "--tp-size", "4", extra])
        assert error is not None and error.message == f"unrecognized arguments: {extra}"
    vllm = _vllm()
    for extra in ("b", "c"):
        error = check_argv(vllm, ["/m", "--served-model-name=a", extra])
        assert error is not None and error.message == f"unrecognized arguments: {extra}"


def test_what_follows_a_double_dash_is_never_folded() -> None:
    parser = flags._parser(load_table(_doc()))
    options = foldable(parser)
    line = ["--model-path", "/m", "--", "--tp-size", "4"]
    assert fold(line, options, parser._option_string_actions, parser.prefix_chars) == (
        "--model-path",
        PLACEHOLDER,
        "--",
        "--tp-size",
        "4",
    )


def test_options_with_choices_a_fixed_count_or_no_value_are_not_foldable() -> None:
    options = foldable(flags._parser(load_table(_doc())))
    assert {"--model-path", "--model", "--tp-size", "--mem-fraction-static", "--context-length"} <= set(options)
    assert not {"--kv-cache-dtype", "--trust-remote-code", "--enable-expert-distribution-metrics"} & set(options)
    # An engine's own converter takes any value, so its choices are not enforced: foldable.
    assert "--moe-backend" in options


def _vllm_with_port() -> FlagTable:
    doc: dict[str, Any] = {**_doc("vllm", "0.32.0")}
    table = _vllm()
    doc["parser"] = {
        "prog": table.prog,
        "usage": table.usage,
        "allow_abbrev": True,
        "error_prog": table.error_prog,
        "error_usage": table.error_usage,
        "preprocess": "vllm-flexible",
    }
    doc["positionals"] = [{"name": "model_tag", "nargs": "?"}]
    doc["flags"] = [
        {"flags": ["--max-model-len"], "nargs": None, "type": "int"},
        {"flags": ["--served-model-name"], "nargs": "+", "type": "optional:str"},
        {"flags": ["--port"], "nargs": None, "type": "int"},
    ]
    return load_table(doc)


# The property: over the shipped tables, a line judged after another line with the same options (values
# drawn apart) gets exactly the verdict argparse gives it on its own.
VALUES = st.one_of(
    st.integers(1, 9).map(str),  # folds under every type: lines with these differ only in folded values
    st.integers(1, 9).map(str),
    st.integers(-3, 70000).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(str),
    st.sampled_from(["a", "b", "/m", "x y", "None", "", "-", "--", "-x", "-1", "[1]", '{"a": 1}', "auto", "fp8", "0"]),
)


@st.composite
def two_lines(draw: st.DrawFn) -> tuple[FlagTable, list[str], list[str]]:
    table = draw(st.sampled_from([t for t in tables() if t.version in ("0.32.0", "0.5.23")]))
    options = sorted({o for f in table.flags for o in f.flags})
    parser = flags._parser(table)
    folded = foldable(parser)
    single = sorted(o for o, (_, many) in folded.items() if not many)
    many = sorted(o for o, (_, many) in folded.items() if many)
    words = st.one_of(
        st.sampled_from(options),
        st.sampled_from(single),
        st.sampled_from(many),
        st.sampled_from(["--bogus", "--max-model", "--tp", "-O3", "--"]),
    )
    shape = draw(st.lists(st.tuples(words, st.integers(0, 2), st.booleans()), min_size=1, max_size=8))
    lines: list[list[str]] = [[], []]
    for option, count, joined in shape:
        for line in lines:
            values = [draw(VALUES) for _ in range(count)]
            if joined and values:
                line.append(f"{option}={values[0]}")
                line.extend(values[1:])
            else:
                line.extend([option, *values])
    # SGLang requires --model-path: without it nearly every line ends in that one refusal.
    head = ["--model-path", "/m"] if table.engine == "sglang" else draw(st.sampled_from([[], ["/m"]]))
    return table, head + lines[0], head + lines[1]


def _alone(table: FlagTable, line: list[str]) -> ArgvError | None:
    flags._VERDICTS.clear()
    flags._OUTCOMES.clear()
    return check_argv(table, line)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two_lines())
def test_a_line_judged_through_folded_answers_gets_argparses_own_verdict(
    drawn: tuple[FlagTable, list[str], list[str]],
) -> None:
    table, first, second = drawn
    expected = _alone(table, second)
    _alone(table, first)  # its answer is kept for its folded form
    flags._VERDICTS.clear()
    assert check_argv(table, second) == expected
