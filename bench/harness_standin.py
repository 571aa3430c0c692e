"""Start the engine stand-in for the bench harnesses and tests, as a real subprocess.

    python bench/harness_standin.py --bind 127.0.0.1 -- vllm serve M --port P --served-model-name M

Runs `reconciler.sim.standin` with two differences, both things vLLM already
does and the stand-in does not (yet):

- Nagle's algorithm is off on the server's sockets. vLLM and SGLang serve
  through asyncio (uvicorn), which sets TCP_NODELAY on every connection; the
  stand-in's http.server does not, so a chunk written right after the headers
  waits ~40 ms for the client's delayed ACK. That delay lands in exactly what
  the latency probe measures (a one-token request) and would be subtracted
  from every prompt processing time.
- A chat stream's first chunk (the assistant role) is sent with the first
  token, not before prefill. vLLM emits it on the engine's first output; the
  stand-in sends it as soon as the request arrives, which makes the time to
  first response (llama-benchy's basis for prompt processing time) ~0.

When the stand-in does both itself, this wrapper changes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from typing import Any

from reconciler.sim import standin, standin_http

_send_event = standin_http.Handler._event


def _is_role_only(obj: dict[str, Any]) -> bool:
    choices = obj.get("choices") or [{}]
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    return isinstance(delta, dict) and "role" in delta and not delta.get("content")


def _event_role_with_first_token(self: standin_http.Handler, obj: dict[str, Any]) -> None:
    held: dict[str, Any] | None = getattr(self, "_held_role", None)
    if held is None and _is_role_only(obj):
        self._held_role = obj  # type: ignore[attr-defined]
        return
    if held is not None:
        self._held_role = None  # type: ignore[attr-defined]
        _send_event(self, held)
    _send_event(self, obj)


def main() -> int:
    standin_http.Handler.disable_nagle_algorithm = True
    standin_http.Handler._event = _event_role_with_first_token  # type: ignore[method-assign]
    return standin.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
