"""Where each engine registers its command line, and how its parser is built around it.

SGLang (`python3 -m sglang.launch_server ARGS`): `sglang/launch_server.py`
calls `prepare_server_args(sys.argv[1:])` in `sglang/srt/server_args.py`,
which builds `argparse.ArgumentParser(prog=...)` and hands it to
`ServerArgs.add_cli_args`.

vLLM (`vllm serve [MODEL] ARGS`): `vllm/entrypoints/cli/main.py` builds the
top parser (`vllm`, with `-v/--version` and one subparser per subcommand of
its CMD_MODULES); `ServeSubcommand.subparser_init` in
`vllm/entrypoints/cli/serve.py` adds the `serve` parser and passes it to
`make_arg_parser`, which adds `model_tag`, the frontend's and the engine's
arguments. Arguments the serve parser does not know travel up to the top
parser, so vLLM reports them as `vllm: error: unrecognized arguments: ...`.
Both parsers are vLLM's `FlexibleArgumentParser`, which rewrites the argv
before argparse sees it (`preprocess: vllm-flexible`, done by
`reconciler.engines.flags`).
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, field
from typing import Any

from scripts.flagtables.interp import Interp
from scripts.flagtables.modules import Module
from scripts.flagtables.sink import Sink, to_entries
from scripts.flagtables.values import EngineError, Indeterminate
from scripts.flagtables.wheel import Wheel


class ReadError(Exception):
    """The wheel does not have the shape this reader knows (a module or function moved)."""


@dataclass
class Extracted:
    prog: str
    usage: str | None
    allow_abbrev: bool
    add_help: bool
    error_prog: str
    """The parser that reports unrecognized arguments (vLLM's top parser; SGLang's only one)."""
    error_usage: str | None
    preprocess: str | None
    flags: list[dict[str, Any]]
    positionals: list[dict[str, Any]]
    notes: list[str]
    files: list[str] = field(default_factory=list)


def _module(interp: Interp, name: str) -> Module:
    module = interp.module(name)
    if module is None:
        raise ReadError(f"{interp.wheel.filename} has no module {name}")
    return module


def _function(module: Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise ReadError(f"{module.path} defines no function {name}")


def _parser_keywords(function: ast.FunctionDef) -> dict[str, object]:
    """The constant keywords of the `ArgumentParser(...)` call a function makes."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser"):
            return {k.arg: k.value.value for k in node.keywords if k.arg and isinstance(k.value, ast.Constant)}
    raise ReadError(f"{function.name} builds no ArgumentParser")


def read_sglang(wheel: Wheel) -> Extracted:
    interp = Interp(wheel, argv=["sglang/launch_server.py"])
    module = _module(interp, "sglang.srt.server_args")
    keywords = _parser_keywords(_function(module, "prepare_server_args"))
    sink = Sink(interp)
    server_args = module.lookup("ServerArgs")
    interp.call(interp.getattr(server_args, "add_cli_args"), [sink], {})
    flags, positionals, notes = to_entries(sink)
    # Without prog=, argparse names the program after sys.argv[0]: launch_server.py under `python3 -m`.
    prog = str(keywords.get("prog", "launch_server.py"))
    allow_abbrev = bool(keywords.get("allow_abbrev", True))
    add_help = bool(keywords.get("add_help", True))
    usage = keywords.get("usage")
    return Extracted(
        prog=prog,
        usage=str(usage) if usage is not None else None,
        allow_abbrev=allow_abbrev,
        add_help=add_help,
        error_prog=prog,
        error_usage=str(usage) if usage is not None else None,
        preprocess=None,
        flags=flags,
        positionals=positionals,
        notes=interp.notes + notes,
        files=list(wheel.read),
    )


def read_vllm(wheel: Wheel) -> Extracted:
    interp = Interp(wheel, argv=["vllm", "serve", "MODEL"])
    serve = _module(interp, "vllm.entrypoints.cli.serve")
    commands = interp.call(serve.lookup("cmd_init"), [], {})
    serve_cmd = next((c for c in commands if interp.getattr(c, "name") == "serve"), None)  # type: ignore[attr-defined]
    if serve_cmd is None:
        raise ReadError("vllm/entrypoints/cli/serve.py has no 'serve' subcommand")
    sink = Sink(interp)
    interp.call(interp.getattr(serve_cmd, "subparser_init"), [sink], {})
    if not sink.subparsers:
        raise ReadError("ServeSubcommand.subparser_init added no parser")
    name, parser_kwargs = sink.subparsers[0]
    flags, positionals, notes = to_entries(sink)
    usage = parser_kwargs.get("usage")
    top = _top_parser(_subcommands(interp))
    return Extracted(
        prog=f"vllm {name}",
        usage=str(usage) if isinstance(usage, str) else None,
        allow_abbrev=bool(parser_kwargs.get("allow_abbrev", True)),
        add_help=bool(parser_kwargs.get("add_help", True)),
        error_prog="vllm",
        error_usage=top.format_usage().removeprefix("usage: ").strip(),
        preprocess="vllm-flexible",
        flags=flags,
        positionals=positionals,
        notes=interp.notes + notes,
        files=list(wheel.read),
    )


def _subcommands(interp: Interp) -> list[str]:
    """The subcommand names of `vllm`, in the order main.py registers them (for its usage line)."""
    main = _module(interp, "vllm.entrypoints.cli.main")
    names: list[str] = []
    for node in ast.walk(_function(main, "main")):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "CMD_MODULES" for t in node.targets):
            assert isinstance(node.value, ast.List)
            for element in node.value.elts:
                module = interp.module(ast.unparse(element))
                if module is None:
                    continue
                try:
                    found = interp.call(module.lookup("cmd_init"), [], {})
                    names += [str(interp.getattr(c, "name")) for c in found]  # type: ignore[attr-defined]
                except (Indeterminate, EngineError, LookupError, TypeError) as exc:
                    interp.note(f"{module.path}: subcommand names not read ({exc})")
    return names


def _top_parser(subcommands: list[str]) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="vllm")
    top.add_argument("-v", "--version", action="version")
    sub = top.add_subparsers(required=False, dest="subparser")
    for name in subcommands:
        sub.add_parser(name)
    return top


READERS = {"sglang": read_sglang, "vllm": read_vllm}
