"""The stand-in's `vllm` command: vLLM's CLI entry points as the rig's engine image carries them.

A real vLLM image runs `vllm serve MODEL ARGS` through vllm/entrypoints/cli/main.py `main()`, which parses
`sys.argv` and calls the subcommand's `ServeSubcommand.cmd` (vllm/entrypoints/cli/serve.py); lanes'
preflight (`facts/preflight.py`) imports exactly those two modules in the image, replaces `cmd` and calls
`main()`, so that the image's own parser judges a lane's arguments and nothing is served. The rig's image
has `vllm/entrypoints/cli/{main,serve}.py` that re-export this module's `main` and `ServeSubcommand`
(`tests/rig/image.py`), so the preflight runs there unchanged, over real ssh and podman.

The parser is the image's own as the simulator's (`engineargs.parser_refusal`: the flag table its
STANDIN_PARSER names, else the one written for its STANDIN_VERSION): refused, it prints argparse's usage
and `vllm: error: ...` and exits 2, as vLLM does; taken, `cmd` runs the stand-in engine (a `--headless`
rank as a worker, no HTTP, as vLLM's headless ranks serve no API).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from reconciler.sim.engineargs import Behaviour, parser_refusal


class ServeSubcommand:
    """vllm/entrypoints/cli/serve.py's subcommand: `cmd` is what runs once the arguments are parsed."""

    name = "serve"

    @staticmethod
    def cmd(args: Sequence[str]) -> None:
        from reconciler.sim import standin  # only once parsed: the preflight never imports the engine

        worker = ["--worker"] if "--headless" in args else []
        raise SystemExit(standin.main([*worker, "--", "vllm", "serve", *args]))


def main() -> None:
    """`vllm serve ARGS` (from `sys.argv`): parse as the image's vLLM parses, then the subcommand's `cmd`."""
    argv = sys.argv[1:]
    if argv[:1] != ["serve"]:
        sys.stderr.write("usage: vllm [-h] [-v] {serve} ...\nvllm: error: the stand-in has only `vllm serve`\n")
        raise SystemExit(2)
    args = argv[1:]
    # An image with a parser has lanes' flag code: without it `parser_refusal` takes anything, which would
    # pass every misspelling as accepted. Failing to import instead judges nothing, as a broken image does.
    from reconciler.engines import flags  # noqa: F401

    behaviour = Behaviour.from_env(dict(os.environ))
    refused = parser_refusal("vllm", args, behaviour.version, behaviour.parser)
    if refused is not None:
        status, text = refused
        sys.stderr.write(text)
        sys.stderr.flush()
        raise SystemExit(status)
    ServeSubcommand.cmd(args)
