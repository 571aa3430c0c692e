"""The stand-in's HTTP face: the OpenAI-compatible endpoints an engine serves.

What the reconciler's readiness gate and the benchmarks rely on is imitated
exactly (status codes while loading, /v1/models shape, SSE chunks with a
final usage chunk, vLLM's Prometheus names); the text generated is filler.
Pacing uses absolute deadlines so a measured tokens/s matches the setting,
and each request is paced on its own thread, so concurrent requests do not
slow each other down (a real engine batches them; the benchmarks only need
the per-request rate to be known). What the engine's own flags change in a
stream, several tokens per chunk under speculative decoding and a faster
prefill of a prompt whose prefix is cached, follows `standin_decoding`.

Each completion is also entered in a ledger of what the stand-in actually
did with it (prompt tokens counted and found cached, content chunks and
tokens sent, whether a usage chunk went out), served at `GET /standin/requests`, a path no real
engine has: tests compare a client's counts with it instead of timing the
stream. Stdlib only.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reconciler.sim.engineargs import Behaviour, EngineArgs, parse_int
from reconciler.sim.standin_decoding import PrefixCache, chunk_schedule, decoding_from_argv

DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")
LEDGER_PATH = "/standin/requests"
LEDGER_SIZE = 1000
"""The newest completions the ledger keeps (a stand-in of a long simulation must not grow)."""


def schedule(behaviour: Behaviour, prompt_tokens: int, max_tokens: int) -> list[float]:
    """When each generated token is due, in seconds after the request arrived, one token per chunk.

    The first after prompt_tokens / pp_tps, then one every 1 / tg_tps, all
    times the slowdown: the pacing the stand-in keeps, as data, so a test
    can replay it on a fake clock (`standin_decoding.chunk_schedule` with
    several tokens per chunk and a cached prefix).
    """
    return [due for due, _ in chunk_schedule(behaviour, prompt_tokens, max_tokens)]


class Engine:
    """Shared state of one stand-in: load clock, prefix cache and the counters /metrics shows.

    `argv`: the engine's command line, whose flags set its decoding (`standin_decoding`).
    """

    def __init__(self, args: EngineArgs, behaviour: Behaviour, started: float, argv: Sequence[str] = ()) -> None:
        self.args = args
        self.behaviour = behaviour
        self.decoding = decoding_from_argv(argv)
        self.cache = PrefixCache(self.decoding.block_size) if self.decoding.prefix_caching else None
        self.loaded_at = started + behaviour.load_s
        self.name = args.served_name + ("-wrong" if behaviour.wrong_model else "")
        self.lock = threading.Lock()
        self.running = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = 0
        self.ledger: deque[dict[str, Any]] = deque(maxlen=LEDGER_SIZE)
        self.seq = 0

    def loaded(self) -> bool:
        return not self.behaviour.never_healthy and time.monotonic() >= self.loaded_at

    def count(self, running: int = 0, prompt: int = 0, generated: int = 0, finished: int = 0) -> None:
        with self.lock:
            self.running += running
            self.prompt_tokens += prompt
            self.generation_tokens += generated
            self.finished += finished

    def enter(self, entry: dict[str, Any]) -> None:
        """Add a completion to the ledger, numbered in the order they were entered."""
        with self.lock:
            self.seq += 1
            self.ledger.append({"seq": self.seq, **entry})

    def entries(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.ledger)

    def metrics(self) -> str:
        label = f'model_name="{self.name}"'
        rows = [
            (
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                self.running,
            ),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", 0),
            (
                "vllm:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                self.prompt_tokens,
            ),
            (
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                self.generation_tokens,
            ),
            (
                "vllm:request_success_total",
                "counter",
                "Count of successfully processed requests.",
                self.finished,
            ),
        ]
        out = []
        for name, kind, help_text, value in rows:
            out += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} {kind}",
                f"{name}{{{label}}} {float(value)}",
            ]
        return "\n".join(out) + "\n"

    def cached(self, prompt: Sequence[str]) -> int:
        """Prompt tokens found in the prefix cache."""
        if self.cache is None:
            return 0
        with self.lock:
            return self.cache.cached(prompt)

    def pace(self, prompt: Sequence[str], max_tokens: int, cached: int = 0) -> Iterator[int]:
        """Yield the tokens of each chunk at its due time (`chunk_schedule`), kept by absolute deadlines.

        The prompt enters the prefix cache once it is prefilled, when the first token is due.
        """
        start = time.monotonic()
        for i, (due, tokens) in enumerate(
            chunk_schedule(self.behaviour, len(prompt), max_tokens, self.decoding, cached)
        ):
            delay = start + due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if i == 0 and self.cache is not None:
                with self.lock:
                    self.cache.insert(prompt)
            yield tokens


def prompt_words(body: dict[str, Any]) -> int:
    """Prompt tokens: whitespace-separated words of the prompt or the messages."""
    return len(prompt_tokens(body))


def prompt_tokens(body: dict[str, Any]) -> list[str]:
    """The prompt as the stand-in tokenizes it: its words, the messages' in order (a token id is a token)."""
    if "messages" in body:
        parts: list[str] = []
        for message in body.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts += [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(parts).split()
    prompt = body.get("prompt", "")
    if isinstance(prompt, list):
        # A list of token ids counts as that many tokens; a list of strings by words.
        return [w for p in prompt for w in ([f"<{p}>"] if isinstance(p, int) else str(p).split())]
    return str(prompt).split()


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True  # a hung client must not keep a stopping container alive

    def __init__(self, address: tuple[str, int], engine: Engine) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.engine = engine
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like uvicorn
    # uvicorn sets TCP_NODELAY; without it a chunk right after the headers waits ~40 ms for a delayed ACK.
    disable_nagle_algorithm = True
    server: StandinServer

    def log_message(self, format: str, *args: Any) -> None:
        # Health polls would flood `docker logs`; only lifecycle lines are printed.
        return

    def do_GET(self) -> None:
        engine = self.server.engine
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if engine.loaded():
                self._send(200, b"", "text/plain")
            else:
                self._json(503, {"error": "model is loading"})
        elif path == "/v1/models":
            data = []
            if engine.loaded():
                data = [
                    {
                        "id": engine.name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "standin",
                        "root": engine.args.model,
                        "max_model_len": engine.args.max_model_len,
                    }
                ]
            self._json(200, {"object": "list", "data": data})
        elif path == "/metrics":
            self._send(200, engine.metrics().encode(), "text/plain; version=0.0.4")
        elif path == "/version":
            self._json(200, {"version": engine.behaviour.version})
        elif path == LEDGER_PATH:
            self._json(200, {"requests": engine.entries()})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        engine = self.server.engine
        path = self.path.split("?", 1)[0]
        length = parse_int(self.headers.get("Content-Length"), 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise TypeError("body is not an object")
        except (ValueError, TypeError) as exc:
            self._json(400, _error(f"invalid JSON body: {exc}", "BadRequestError", 400))
            return
        if not engine.loaded():
            self._json(503, _error("model is loading", "ServiceUnavailableError", 503))
            return
        model = body.get("model")
        if model is not None and model != engine.name:
            self._json(404, _error(f"The model `{model}` does not exist.", "NotFoundError", 404))
            return
        self._complete(engine, body, chat=path.endswith("/chat/completions"))

    def _complete(self, engine: Engine, body: dict[str, Any], *, chat: bool) -> None:
        tokens = prompt_tokens(body)
        prompt = len(tokens)
        wanted = body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
        if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 0:
            self._json(
                400,
                _error(f"max_tokens must be a non-negative integer, not {wanted!r}", "BadRequestError", 400),
            )
            return
        max_tokens = wanted
        stream = bool(body.get("stream"))
        usage_wanted = bool((body.get("stream_options") or {}).get("include_usage"))
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        base = {"id": ident, "created": int(time.time()), "model": engine.name}
        engine.count(running=1, prompt=prompt)
        cached = engine.cached(tokens)
        words: list[str] = []
        chunks = {"role": 0, "content": 0}
        try:
            role = {
                **base,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
            }
            if stream:
                self._start_stream()
            for size in engine.pace(tokens, max_tokens, cached):
                new = [" " + WORDS[(len(words) + k) % len(WORDS)] for k in range(size)]
                first = not words
                words += new
                engine.count(generated=size)
                if stream:
                    if chat and first:
                        self._event(role)  # like vLLM: the role arrives with the first token, after prefill
                        chunks["role"] += 1
                    finish = "length" if len(words) == max_tokens else None
                    self._event({**base, **_piece(chat, "".join(new), finish)})  # one chunk, `size` tokens
                    chunks["content"] += 1
            if stream and chat and not words:
                self._event(role)
                chunks["role"] += 1
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": len(words),
                "total_tokens": prompt + len(words),
            }
            # Entered before the end of the answer is sent: a client that has read the whole answer
            # finds its entry in the ledger.
            engine.enter(
                {
                    "id": ident,
                    "api": "chat" if chat else "completions",
                    "stream": stream,
                    "prompt_tokens": prompt,
                    "cached_tokens": cached,
                    "max_tokens": max_tokens,
                    "completion_tokens": len(words),
                    "content_chunks": chunks["content"],
                    "role_chunks": chunks["role"],
                    "usage_chunk": stream and usage_wanted,
                }
            )
            if stream:
                if usage_wanted:
                    kind = "chat.completion.chunk" if chat else "text_completion"
                    self._event({**base, "object": kind, "choices": [], "usage": usage})
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            else:
                text = "".join(words)
                if chat:
                    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text}}
                else:
                    choice = {"index": 0, "text": text, "logprobs": None}
                choice["finish_reason"] = "length"
                kind = "chat.completion" if chat else "text_completion"
                self._json(200, {**base, "object": kind, "choices": [choice], "usage": usage})
            engine.count(finished=1)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away mid-stream
        finally:
            engine.count(running=-1)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, obj: dict[str, Any]) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _json(self, status: int, obj: dict[str, Any]) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _piece(chat: bool, word: str, finish: str | None) -> dict[str, Any]:
    if chat:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": finish}],
        }
    return {
        "object": "text_completion",
        "choices": [{"index": 0, "text": word, "logprobs": None, "finish_reason": finish}],
    }


def _error(message: str, kind: str, code: int) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": code}
