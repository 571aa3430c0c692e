"""engines/flags.py: an argv judged with argparse rebuilt from a flag table, in argparse's own words."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.engines import flags
from reconciler.engines.flags import Flag, FlagTable, check_argv, engine_argv, load_table, table_for
from reconciler.errors import InputError
from reconciler.spec import Lane

pytestmark = pytest.mark.timeout(30)


def _doc(engine: str = "sglang", version: str = "0.5.19", **parser: Any) -> dict[str, Any]:
    """A table shaped as scripts/flag_tables.py writes them, with a handful of SGLang's flags."""
    return {
        "engine": engine,
        "version": version,
        "builds": [{"engine_version": "0.0.0.dev1+gabc1234", "lane": "x", "rule": "built on a date"}],
        "source": {"package": engine, "wheel": f"{engine}-{version}.whl", "sha256": "0" * 64},
        "parser": {
            "prog": "sglang serve",
            "usage": None,
            "allow_abbrev": True,
            "error_prog": "sglang serve",
            "error_usage": None,
            "preprocess": None,
            **parser,
        },
        "positionals": [],
        "flags": [
            {"flags": ["--model-path", "--model"], "nargs": None, "type": "str", "required": True},
            {"flags": ["--tp-size", "--tensor-parallel-size"], "nargs": None, "type": "int"},
            {"flags": ["--mem-fraction-static"], "nargs": None, "type": "float"},
            {"flags": ["--kv-cache-dtype"], "nargs": None, "type": "str", "choices": ["auto", "fp8_e4m3", "nvfp4"]},
            {"flags": ["--kv-events-config"], "nargs": None, "type": "str"},
            {"flags": ["--trust-remote-code"], "nargs": 0},
            {"flags": ["--context-length"], "nargs": None, "type": "custom:sglang.srt.utils.common.human_readable_int"},
            {"flags": ["--moe-backend"], "nargs": None, "type": "custom:x.<lambda>", "choices": ["cutlass"]},
            {"flags": ["--stream-output"], "nargs": 0},
            {"flags": ["--enable-expert-distribution-metrics"], "nargs": 0, "refused": "--enable-expert-... is gone."},
        ],
        "notes": [],
    }


@pytest.fixture
def table() -> FlagTable:
    return load_table(_doc())


def test_a_command_line_the_engine_takes_passes(table: FlagTable) -> None:
    argv = ["--model-path", "/m", "--tp-size", "4", "--mem-fraction-static", "0.8", "--kv-cache-dtype", "fp8_e4m3"]
    assert check_argv(table, [*argv, "--trust-remote-code", "--context-length", "128k"]) is None


@pytest.mark.parametrize(
    ("argv", "message", "flag", "index"),
    [
        (
            ["--model-path", "/m", "--kv-cache-dtpye", "fp8"],
            "unrecognized arguments: --kv-cache-dtpye fp8",
            "--kv-cache-dtpye",
            2,
        ),
        (
            ["--model-path", "/m", "--kv-cache-dtype", "fp4"],
            "argument --kv-cache-dtype: invalid choice: 'fp4' (choose from 'auto', 'fp8_e4m3', 'nvfp4')",
            "--kv-cache-dtype",
            2,
        ),
        (
            ["--model-path", "/m", "--tp-size", "four"],
            "argument --tp-size/--tensor-parallel-size: invalid int value: 'four'",
            "--tp-size",
            2,
        ),
        (
            ["--model-path", "/m", "--mem-fraction-static", "lots"],
            "argument --mem-fraction-static: invalid float value: 'lots'",
            "--mem-fraction-static",
            2,
        ),
        (
            ["--model-path", "/m", "--tp-size"],
            "argument --tp-size/--tensor-parallel-size: expected one argument",
            "--tp-size",
            2,
        ),
        (["--tp-size", "4"], "the following arguments are required: --model-path/--model", None, None),
        (
            ["--model-path", "/m", "--enable-expert-distribution-metrics"],
            "--enable-expert-... is gone.",
            "--enable-expert-distribution-metrics",
            2,
        ),
        (
            ["--model-path", "/m", "--kv", "x"],
            "ambiguous option: --kv could match --kv-cache-dtype, --kv-events-config",
            "--kv",
            2,
        ),
    ],
)
def test_what_the_engine_refuses_is_said_as_argparse_says_it(
    table: FlagTable, argv: list[str], message: str, flag: str | None, index: int | None
) -> None:
    error = check_argv(table, argv)
    assert error is not None
    assert (error.message, error.flag, error.index, error.status) == (message, flag, index, 2)


def test_the_second_use_of_a_flag_is_the_one_named_when_it_is_the_bad_one(table: FlagTable) -> None:
    error = check_argv(table, ["--model-path", "/m", "--tp-size", "4", "--tp-size=x"])
    assert error is not None and (error.flag, error.index) == ("--tp-size=x", 4)


def test_a_unique_prefix_is_the_flag_it_abbreviates_as_in_the_engine(table: FlagTable) -> None:
    # argparse's allow_abbrev, which SGLang and vLLM leave on: `--kv-cache-dtyp` IS --kv-cache-dtype.
    assert check_argv(table, ["--model-path", "/m", "--kv-cache-dtyp", "nvfp4"]) is None
    strict = load_table(_doc(allow_abbrev=False))
    error = check_argv(strict, ["--model-path", "/m", "--kv-cache-dtyp", "nvfp4"])
    assert error is not None and error.message.startswith("unrecognized arguments: --kv-cache-dtyp")


def test_a_converter_of_the_engines_own_takes_any_value_and_its_choices_are_not_enforced(table: FlagTable) -> None:
    # It may rewrite the value before argparse compares it (vLLM lower-cases --moe-backend).
    assert check_argv(table, ["--model-path", "/m", "--moe-backend", "CUTLASS", "--context-length", "1Ki"]) is None
    assert table.choices("--moe-backend") is None
    assert table.choices("--kv-cache-dtype") == ("auto", "fp8_e4m3", "nvfp4")


def test_stderr_is_usage_then_prog_error(table: FlagTable) -> None:
    error = check_argv(table, ["--model-path", "/m", "--bogus"])
    assert error is not None
    lines = error.stderr().splitlines()
    assert lines[0].startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert lines[-1] == "sglang serve: error: unrecognized arguments: --bogus"


def _vllm() -> FlagTable:
    return load_table(
        {
            **_doc("vllm", "0.32.0"),
            "parser": {
                "prog": "vllm serve",
                "usage": "vllm serve [model_tag] [options]",
                "allow_abbrev": True,
                "error_prog": "vllm",
                "error_usage": "vllm [-h] [-v] {chat,complete,serve} ...",
                "preprocess": "vllm-flexible",
            },
            "positionals": [{"name": "model_tag", "nargs": "?"}],
            "flags": [
                {"flags": ["--max-model-len"], "nargs": None, "type": "int"},
                {"flags": ["--served-model-name"], "nargs": "+", "type": "optional:str"},
                {"flags": ["--compilation-config", "-cc"], "nargs": None, "type": "custom:x.parse_dataclass"},
                {"flags": ["--optimization-level"], "nargs": None, "type": "str"},
                {"flags": ["--max-logprobs"], "nargs": None, "type": "optional:int"},
                {"flags": ["--spec-method"], "nargs": None, "type": "optional:str", "choices": ["mtp", None]},
            ],
        }
    )


def test_vllm_reads_underscores_dotted_keys_and_a_model_flag_as_vllm_does() -> None:
    table = _vllm()
    assert check_argv(table, ["/m", "--max_model_len", "100", "--compilation-config.mode", "3", "-O3"]) is None
    assert check_argv(table, ["--model", "/m", "--served-model-name", "a", "b"]) is None
    assert check_argv(table, ["/m", "--spec-method", "None", "--max-logprobs", "None"]) is None


def test_vllm_reports_unknown_flags_from_its_top_parser_and_the_rest_from_serve() -> None:
    table = _vllm()
    unknown = check_argv(table, ["/m", "--max-model-lenn", "3"])
    assert unknown is not None
    assert unknown.stderr() == (
        "usage: vllm [-h] [-v] {chat,complete,serve} ...\nvllm: error: unrecognized arguments: --max-model-lenn 3\n"
    )
    dotted = check_argv(table, ["/m", "--bogus-config.level", "3"])
    assert dotted is not None and (dotted.flag, dotted.index) == ("--bogus-config.level", 1)
    bad = check_argv(table, ["/m", "--max-logprobs", "many"])
    assert bad is not None and bad.prog == "vllm serve"
    assert bad.message == "argument --max-logprobs: Value many cannot be converted to <class 'int'>."


def test_vllm_refuses_a_served_name_without_a_model_before_argparse() -> None:
    error = check_argv(_vllm(), ["--served-model-name", "x"])
    assert error is not None and error.status == 1
    assert error.message.startswith("`model` should be provided as the first positional argument")


def test_table_for_takes_the_builds_own_then_the_release_then_the_chosen_then_the_nearest_of_its_series() -> None:
    older, newer = load_table(_doc(version="0.5.19")), load_table({**_doc(version="0.5.21"), "builds": []})
    tables = [older, newer]
    # 0.5.19's wheel lists the branch build it stands in for, but is not that build's parser.
    assert table_for("sglang", "0.0.0.dev1+gabc1234", tables) == flags.TableMatch(older, "chosen")
    assert table_for("sglang", "0.5.21", tables) == flags.TableMatch(newer, "release")
    assert table_for("sglang", "0.5.22.dev3+gdeadbee", tables) == flags.TableMatch(newer, "nearest")
    assert table_for("sglang", "0.5.20", tables) == flags.TableMatch(older, "nearest")
    assert table_for("sglang", "0.6.0", tables) is None
    assert table_for("sglang", "0.5.18", tables) is None
    assert table_for("sglang", "0.0.0.dev1+gother", tables) is None
    assert table_for("vllm", "0.5.21", tables) is None
    assert table_for("sglang", "not a version", tables) is None
    # The build's own source (scripts/flag_tables.py --wheel) wins over the release chosen for it.
    own = load_table({**_doc(version="0.0.0.dev1+gabc1234"), "read_from": "build"})
    assert table_for("sglang", "0.0.0.dev1+gabc1234", [older, own, newer]) == flags.TableMatch(own, "build")
    # A build's own table never stands in for a release or for another build of the series.
    branch = load_table({**_doc(version="0.5.21.dev1+gabc"), "read_from": "build", "builds": []})
    assert table_for("sglang", "0.5.21.dev1+gabc", [branch]) is None
    assert table_for("sglang", "0.5.22", [branch]) is None


def test_only_the_builds_own_parser_or_its_release_is_exact() -> None:
    table = load_table(_doc())
    assert [flags.TableMatch(table, how).exact for how in ("build", "release", "chosen", "nearest")] == [
        True,
        True,
        False,
        False,
    ]
    assert [flags.TableMatch(table, how).placed for how in ("build", "release", "chosen", "nearest")] == [
        True,
        True,
        True,
        False,
    ]
    assert table.read_from == "release"  # a table that does not say is a release's
    assert load_table({**_doc(), "read_from": "build"}).read_from == "build"


def test_the_shipped_tables_stand_for_the_example_fleets_builds() -> None:
    found = {t.engine + "-" + t.version: t.builds for t in flags.tables()}
    assert found == {
        "sglang-0.5.19": ("0.0.0.dev1+gda64c5cbb",),
        # Tracked (sglang-releases' newest two), pinned by no lane yet.
        "sglang-0.5.22": (),
        "sglang-0.5.23": (),
        "vllm-0.26.0": ("0.26.1rc0+glm53.r39.vllm9e5d1793",),
        "vllm-0.32.0": ("0.32.1.dev0+g8244d1c44",),
        # Tracked (vllm-releases' newest), pinned by no lane yet: it judges lanes at that very release.
        "vllm-0.33.0": (),
    }
    for table in flags.tables():
        assert len(table.sha256) == 64 and table.wheel.endswith(".whl")
        # Read from the releases' wheels: none is a build's own parser, so their refusals only warn.
        assert table.read_from == "release"
        for build in table.builds:
            assert table_for(table.engine, build) == flags.TableMatch(table, "chosen")


def test_a_lane_at_vllm_0_33_0_is_judged_exactly_by_its_own_release() -> None:
    match = table_for("vllm", "0.33.0")
    assert match is not None and (match.table.version, match.how, match.exact) == ("0.33.0", "release", True)
    error = flags.check_argv(match.table, ["/m", "--enable-prefix-cachng"])
    assert error is not None and error.message == "unrecognized arguments: --enable-prefix-cachng"
    assert error.prog == "vllm"


def _option_strings(version: str) -> dict[str, Flag]:
    table = next(t for t in flags.tables() if (t.engine, t.version) == ("sglang", version))
    return {option: flag for flag in table.flags for option in flag.flags}


def test_sglang_0_5_23_against_0_5_19_option_by_option() -> None:
    # What lanes would have missed judging a 0.5.23 lane by 0.5.19's table (issue 25's figures), counted
    # as argparse counts options: every spelling (a --no- form, an alias) is one.
    old, new = _option_strings("0.5.19"), _option_strings("0.5.23")
    both = old.keys() & new.keys()
    removed, added = sorted(old.keys() - new.keys()), sorted(new.keys() - old.keys())
    rechosen = sorted(o for o in both if old[o].choices != new[o].choices)
    assert (len(old), len(new), len(removed), len(added), len(rechosen)) == (521, 559, 27, 65, 25)
    # As table entries (one per argparse action) 503 and 531: 27 removed, 55 added.
    entries = {v: {f.flags[0] for f in t.flags} for t in flags.tables() if t.engine == "sglang" for v in [t.version]}
    assert (len(entries["0.5.19"]), len(entries["0.5.23"])) == (503, 531)
    assert (len(entries["0.5.19"] - entries["0.5.23"]), len(entries["0.5.23"] - entries["0.5.19"])) == (27, 55)
    # 0.5.19 had --cuda-graph-max-bs beside its -decode and -prefill forms; 0.5.23 kept only those two.
    assert "--cuda-graph-max-bs" in removed
    assert {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"} <= both
    for option, parser in (("--reasoning-parser", "deepseek-v41"), ("--tool-call-parser", "deepseekv41")):
        assert option in rechosen
        old_choices, new_choices = old[option].choices or (), new[option].choices or ()
        assert parser not in old_choices and parser in new_choices


@pytest.mark.parametrize(
    ("engine", "command", "expected"),
    [
        ("sglang", ["python3", "-m", "sglang.launch_server", "--tp-size", "4"], (3, ["--tp-size", "4"])),
        ("sglang", ["sglang", "serve", "--model-path", "/m"], (2, ["--model-path", "/m"])),
        ("vllm", ["vllm", "serve", "/m", "--port", "8000"], (2, ["/m", "--port", "8000"])),
        (
            "vllm",
            [
                "/bin/sh",
                "-c",
                'ray start ... && exec "$@"',
                "lanes-ray-head",
                "6379",
                "10.0.0.1",
                "vllm",
                "serve",
                "/m",
            ],
            (8, ["/m"]),
        ),
        ("vllm", ["ray", "start", "--address", "10.0.0.1:6379", "--block"], None),
        ("sglang", ["vllm", "serve", "/m"], None),
    ],
)
def test_engine_argv_finds_where_the_engines_own_arguments_start(
    engine: str, command: list[str], expected: tuple[int, list[str]] | None
) -> None:
    assert engine_argv(engine, command) == expected


def _lane(engine: str, version: str, kv: str) -> Lane:
    return Lane.model_validate(
        {
            "name": "l",
            "engine": engine,
            "engine_version": version,
            "image": "r/i@sha256:" + "a" * 64,
            "model": "m",
            "hosts": ["h"],
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.5,
            "kv_cache_dtype": kv,
        }
    )


def test_kv_spelling_takes_the_first_spelling_the_release_accepts() -> None:
    spellings = {"bf16": ("bfloat16", "bf16"), "nvfp4": ("nvfp4",), "fp8_ds_mla": ("fp8_ds_mla",)}
    # The example production build's table (SGLang 0.5.19) has both bf16 spellings: the first wins.
    assert flags.kv_spelling(_lane("sglang", "0.0.0.dev1+gda64c5cbb", "bf16"), "SGLang", spellings) == "bfloat16"
    assert flags.kv_spelling(_lane("sglang", "0.0.0.dev1+gda64c5cbb", "nvfp4"), "SGLang", spellings) == "nvfp4"
    # vLLM 0.26.0 (the glm53 fork's release) has fp8_ds_mla but no nvfp4_ds_mla.
    vllm = {"nvfp4_ds_mla": ("nvfp4_ds_mla",), "fp8_ds_mla": ("fp8_ds_mla",)}
    assert (
        flags.kv_spelling(_lane("vllm", "0.26.1rc0+glm53.r39.vllm9e5d1793", "fp8_ds_mla"), "vLLM", vllm) == "fp8_ds_mla"
    )
    # Judged by that release's table, the fork may have it: it is written as asked (engine-flags warns).
    fork = _lane("vllm", "0.26.1rc0+glm53.r39.vllm9e5d1793", "nvfp4_ds_mla")
    assert flags.kv_spelling(fork, "vLLM", vllm) == "nvfp4_ds_mla"
    # The release itself has no such choice: refused with its choices.
    with pytest.raises(InputError) as refused:
        flags.kv_spelling(_lane("vllm", "0.26.0", "nvfp4_ds_mla"), "vLLM", vllm)
    assert refused.value.field == "kv_cache_dtype"
    assert "vLLM 0.26.0 has no KV cache dtype" in refused.value.message and "fp8_ds_mla" in refused.value.message
    # Without a table of its own, the first spelling, and the vocabulary's own refusal.
    assert flags.kv_spelling(_lane("vllm", "0.40.0", "nvfp4_ds_mla"), "vLLM", vllm) == "nvfp4_ds_mla"
    with pytest.raises(InputError) as unknown:
        flags.kv_spelling(_lane("sglang", "0.9.0", "fp16"), "SGLang", spellings)
    assert unknown.value.field == "kv_cache_dtype"


def test_help_is_no_flag_error_and_prints_nothing(table: FlagTable, capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's own -h/--help, which both engines keep: the engine prints its help and exits 0.
    assert check_argv(table, ["--model-path", "/m", "--help"]) is None
    assert capsys.readouterr() == ("", "")
    bare = load_table(_doc(add_help=False))
    error = check_argv(bare, ["--model-path", "/m", "-h"])
    assert error is not None and error.message == "unrecognized arguments: -h"
