"""The rig image's `vllm` command: the image's parser judges, and only taken arguments reach the engine."""

from __future__ import annotations

import sys

import pytest

from reconciler.sim import standin_vllm

pytestmark = pytest.mark.timeout(30)

MODEL = "/models/Qwen3-8B"


def _run(monkeypatch: pytest.MonkeyPatch, argv: list[str], parser: str) -> list[list[str]]:
    started: list[list[str]] = []
    monkeypatch.setattr(sys, "argv", ["vllm", *argv])
    monkeypatch.setenv("STANDIN_PARSER", parser)
    monkeypatch.setattr(standin_vllm.ServeSubcommand, "cmd", staticmethod(lambda args: started.append(list(args))))
    standin_vllm.main()
    return started


def test_a_misspelled_flag_is_refused_in_vllms_words_and_nothing_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        _run(monkeypatch, ["serve", MODEL, "--enable-prefix-cachng"], "vllm-0.33.0")
    assert ended.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --enable-prefix-cachng" in err
    assert err.startswith("usage:")


def test_arguments_the_parser_takes_reach_the_subcommand(monkeypatch: pytest.MonkeyPatch) -> None:
    args = [MODEL, "--enable-prefix-caching", "--tensor-parallel-size", "2"]
    assert _run(monkeypatch, ["serve", *args], "vllm-0.33.0") == [args]


def test_a_command_other_than_serve_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as ended:
        _run(monkeypatch, ["bench", MODEL], "vllm-0.33.0")
    assert ended.value.code == 2
