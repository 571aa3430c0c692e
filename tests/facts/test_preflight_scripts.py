"""The preflight's parse-only scripts, run by a real python3 against packages shaped as the engines' entry points.

Each fake package has the call structure the scripts rely on (read in the wheels: vllm 0.33.0's
vllm/entrypoints/cli/main.py and serve.py, sglang 0.5.23's sglang/launch_server.py and
sglang/srt/server_args.py prepare_server_args) and does something loud after parsing (serving, needing a
GPU), so a script that let the engine go on past its parser fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.facts.preflight import SGLANG_SCRIPT, VLLM_SCRIPT, read_result

pytestmark = pytest.mark.timeout(60)

VLLM = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": """
import argparse


class ServeSubcommand:
    name = "serve"

    @staticmethod
    def cmd(args):
        print("SERVING")
        raise SystemExit(7)

    def validate(self, args):
        if args.tool_call_parser and not args.enable_auto_tool_choice:
            raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")

    def subparser_init(self, subparsers):
        parser = subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]")
        parser.add_argument("model_tag", nargs="?")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--enable-prefix-caching", action="store_true")
        parser.add_argument("--enable-auto-tool-choice", action="store_true")
        parser.add_argument("--tool-call-parser")
        return parser


def cmd_init():
    return [ServeSubcommand()]
""",
    "vllm/entrypoints/cli/main.py": """
import argparse


def main():
    import vllm.entrypoints.cli.serve

    parser = argparse.ArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    cmds = {}
    for cmd in vllm.entrypoints.cli.serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        cmds[cmd.name] = cmd
    args = parser.parse_args()
    if args.subparser in cmds:
        cmds[args.subparser].validate(args)
    args.dispatch_function(args)
""",
}

SGLANG = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/plugins.py": "def load_plugins():\n    pass\n",
    "sglang/srt/server_args.py": """
import argparse


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path")
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
    args = parser.parse_args(argv)
    raise RuntimeError("ServerArgs needs the model and the GPU: " + repr(args))
""",
}


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _run(script: str, root: Path, *argv: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(root)},
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_vllm_arguments_vllm_takes_are_parsed_validated_and_never_served(tmp_path: Path) -> None:
    root = _package(tmp_path, VLLM)
    status, out, err = _run(VLLM_SCRIPT, root, "/models/m", "--port", "8001", "--enable-prefix-caching")
    assert (status, out) == (0, ""), err
    assert read_result(status, err).outcome == "accepted"


def test_a_misspelled_vllm_flag_is_refused_in_vllms_own_words(tmp_path: Path) -> None:
    root = _package(tmp_path, VLLM)
    status, out, err = _run(VLLM_SCRIPT, root, "/models/m", "--enable-prefix-cachng")
    assert status == 2 and "SERVING" not in out
    verdict = read_result(status, err)
    assert verdict.outcome == "refused"
    assert verdict.message == "vllm: error: unrecognized arguments: --enable-prefix-cachng"


def test_vllms_own_validation_after_parsing_refuses_too(tmp_path: Path) -> None:
    root = _package(tmp_path, VLLM)
    status, _, err = _run(VLLM_SCRIPT, root, "/models/m", "--tool-call-parser", "glm47")
    verdict = read_result(status, err)
    assert (status, verdict.outcome) == (3, "refused")
    assert verdict.message == "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"


def test_an_image_without_the_engine_judges_nothing(tmp_path: Path) -> None:
    status, _, err = _run(VLLM_SCRIPT, tmp_path, "/models/m")
    verdict = read_result(status, err)
    assert verdict.outcome == "unjudged" and "ModuleNotFoundError" in verdict.message


def test_sglang_stops_after_its_parse_and_before_server_args_need_the_gpu(tmp_path: Path) -> None:
    root = _package(tmp_path, SGLANG)
    status, _, err = _run(SGLANG_SCRIPT, root, "--model-path", "/m", "--cuda-graph-max-bs-decode", "8")
    assert status == 0, err
    assert "RuntimeError" not in err


def test_sglang_refuses_an_abbreviation_two_flags_share_as_ambiguous(tmp_path: Path) -> None:
    # SGLang 0.5.23 has --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill and no --cuda-graph-max-bs
    # (sglang/srt/arg_groups/fields/exec_.py); its parser keeps argparse's allow_abbrev default.
    root = _package(tmp_path, SGLANG)
    status, _, err = _run(SGLANG_SCRIPT, root, "--model-path", "/m", "--cuda-graph-max-bs", "8")
    verdict = read_result(status, err)
    assert (status, verdict.outcome) == (2, "refused")
    assert verdict.message == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )


@pytest.mark.parametrize(
    ("status", "stderr", "outcome"),
    [
        (0, "", "accepted"),
        (2, "usage: vllm [-h]\nvllm: error: unrecognized arguments: --x\n", "refused"),
        (2, "no error line\n", "unjudged"),  # exit 2 without argparse's line: not argparse's refusal
        (137, "", "unjudged"),  # killed by its memory cap
        (127, "exec: python3: not found\n", "unjudged"),
        (3, "", "unjudged"),
    ],
)
def test_read_result(status: int, stderr: str, outcome: str) -> None:
    assert read_result(status, stderr).outcome == outcome
