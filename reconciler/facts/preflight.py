"""The one-off container that runs an engine's own argument parsing in the lane's pinned image.

A flag table (`engines/flagtables/`) is a release's parser read out of its wheel; a nightly, a fork or a
branch build may accept or refuse flags that release does not, and only the image knows. So before a
change stops anything, lanes runs the image's own parser on the lane's engine arguments, with no GPU,
no network, no model and a memory cap, and reads the verdict from the exit status:

    docker run --rm --name N --network none --memory M --memory-swap M --entrypoint python3 IMAGE
        -c SCRIPT ARG...

SCRIPT is one of the constants below (the arguments arrive as `sys.argv[1:]`, never as text of the
script). Each runs exactly the engine's own parser and stops before the engine does anything with the
result:

- vLLM (`vllm serve ...`): vllm/entrypoints/cli/main.py `main()` builds the top `vllm` parser and one
  subparser per subcommand (`ServeSubcommand.subparser_init` in vllm/entrypoints/cli/serve.py hands the
  serve parser to `make_arg_parser`, vllm/entrypoints/openai/cli_args.py), parses `sys.argv` with vLLM's
  `FlexibleArgumentParser` (vllm/utils/argparse_utils.py), runs the subcommand's `validate`
  (`validate_parsed_serve_args`) and then `args.dispatch_function(args)`, which is `ServeSubcommand.cmd`
  (read in the vllm 0.32.0 and 0.33.0 wheels). The script replaces `ServeSubcommand.cmd` before `main()`
  registers it, so parsing and validation are vLLM's and nothing is served.
- SGLang (`python3 -m sglang.launch_server ...`): sglang/launch_server.py calls `load_plugins()` and
  then `prepare_server_args(sys.argv[1:])` (sglang/srt/server_args.py), which builds the parser
  (`argparse.ArgumentParser`, `ServerArgs.add_cli_args`), calls `parser.parse_args(argv)` once and then
  builds `ServerArgs` from the namespace, whose checks need the model and the GPU (read in the sglang
  0.5.19, 0.5.22 and 0.5.23 wheels). The script lets that one `parse_args` finish and exits 0 after it.

Exit statuses: 0 the parser took the arguments; 2 argparse refused them (its usage and `prog: error:
message` on stderr, the engine's own words); `REFUSED_EXIT` the engine's own validation raised after
parsing (its exception's last line on stderr); anything else (the image has no python3 or no engine,
the cap killed it, docker failed) judges nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reconciler.facts.docker import DOCKER

PREFLIGHT_MARKER = "lanes-preflight"
REFUSED_EXIT = 3
"""The engine's own validation refused the parsed arguments (vLLM's `validate_parsed_serve_args`)."""
ARGPARSE_EXIT = 2
MEMORY = "4g"
"""The cap on the parsing container: importing vLLM (torch included) takes about 1-2 GB on arm64."""
STDERR_KEPT = 4000

VLLM_SCRIPT = f"""# {PREFLIGHT_MARKER}: vllm
import sys, traceback
import vllm.entrypoints.cli.serve as serve
def parsed(args):
    raise SystemExit(0)
serve.ServeSubcommand.cmd = staticmethod(parsed)
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", "serve", *sys.argv[1:]]
try:
    main()
except SystemExit:
    raise
except Exception as exc:
    print(traceback.format_exception_only(exc)[-1].strip(), file=sys.stderr)
    raise SystemExit({REFUSED_EXIT})
"""

SGLANG_SCRIPT = f"""# {PREFLIGHT_MARKER}: sglang
import argparse, sys
try:
    from sglang.srt.plugins import load_plugins
except ImportError:
    load_plugins = None
from sglang.srt.server_args import prepare_server_args
real = argparse.ArgumentParser.parse_args
def parse_only(self, *args, **kwargs):
    real(self, *args, **kwargs)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_only
if load_plugins is not None:
    load_plugins()
prepare_server_args(sys.argv[1:])
"""

SCRIPTS = {"vllm": VLLM_SCRIPT, "sglang": SGLANG_SCRIPT}
"""Engines whose parser lanes can run alone in their image."""

Outcome = Literal["accepted", "refused", "unjudged"]


def argv_key(engine: str, digest: str, argv: Sequence[str]) -> str:
    """What a verdict is cached under: the engine, the image digest and the engine arguments, hashed."""
    text = json.dumps([engine, digest, list(argv)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def container_name(lane: str, key: str) -> str:
    return f"{PREFLIGHT_MARKER}-{lane}-{key[:12]}"


def preflight_argv(engine: str, image: str, name: str, argv: Sequence[str]) -> list[str]:
    return [DOCKER, "run", "--rm", "--name", name, "--network", "none", "--memory", MEMORY, "--memory-swap",
            MEMORY, "--entrypoint", "python3", image, "-c", SCRIPTS[engine], *argv]  # fmt: skip


@dataclass(frozen=True)
class PreflightResult:
    outcome: Outcome
    message: str
    """The engine's sentence (`vllm: error: unrecognized arguments: --x`), or why nothing was judged."""
    stderr: str = ""


def read_result(exit_status: int, stderr: str) -> PreflightResult:
    """The verdict of one parsing container, from its exit status and (bounded) stderr."""
    tail = stderr[-STDERR_KEPT:]
    lines = [line for line in tail.splitlines() if line.strip()]
    if exit_status == 0:
        return PreflightResult("accepted", "", tail)
    if exit_status == ARGPARSE_EXIT:
        said = next((line for line in reversed(lines) if ": error: " in line), None)
        if said is not None:
            return PreflightResult("refused", said.strip(), tail)
    if exit_status == REFUSED_EXIT and lines:
        return PreflightResult("refused", lines[-1].strip(), tail)
    last = lines[-1].strip() if lines else "no output"
    return PreflightResult("unjudged", f"exit status {exit_status}: {last}", tail)
