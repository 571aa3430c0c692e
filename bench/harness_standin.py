"""Start the engine stand-in for the bench harnesses and tests, as a real subprocess.

    python bench/harness_standin.py --bind 127.0.0.1 -- vllm serve M --port P --served-model-name M

Runs `reconciler.sim.standin` with one difference that real engines already
have: Nagle's algorithm is off on the server's sockets. vLLM and SGLang serve
through asyncio (uvicorn), which sets TCP_NODELAY on every connection; the
stand-in's http.server does not, so a response chunk written right after the
headers waits ~40 ms for the client's delayed ACK. That delay lands in
exactly what llama-benchy's latency probe measures (a one-token request) and
would be subtracted from every prompt processing time. When the stand-in
disables Nagle itself, this wrapper changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.sim import standin, standin_http  # noqa: E402


def main() -> int:
    standin_http.Handler.disable_nagle_algorithm = True
    return standin.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
