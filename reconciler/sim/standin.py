"""The engine stand-in's entry point: `python -m reconciler.sim.standin [--bind ADDR] [--worker] ENGINE ARGV`.

Spawned as one real process per simulated container (and used as the
entrypoint inside real podman containers in the rig), in place of vLLM or
SGLang. Head ranks serve HTTP (see `standin_http`); `--worker` ranks of
multi-node lanes only stay alive, as `--headless` workers do. A Ray lane's
head first waits until every rank's node has joined, and its workers join it
(`standin_ray`), as lanes' Ray head script and `ray start` do. SIGTERM
exits 0 promptly; the lifecycle lines printed here are what `docker logs`
shows. Stdlib only, so a container "starts" in a fraction of a second.

Every rank first has its command line judged as its engine release would
(`engineargs.engine_refusal`): a flag the engine does not have ends the rank
at once with argparse's usage and error on stderr and exit status 2, on
workers as on the head, as the engine's own parser would end it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from reconciler.sim.engineargs import Behaviour, engine_refusal, scan_engine_argv
from reconciler.sim.standin_http import Engine, StandinServer
from reconciler.sim.standin_ray import (
    ScriptFailedError,
    engine_argv,
    join,
    ray_head,
    ray_worker,
    wait_for_nodes,
)


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} standin[{os.getpid()}]: {message}", flush=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # SystemExit unwinds serve_forever / sleep in the main thread: exit 0 promptly.
    raise SystemExit(0)


def _crash_later(after_s: float) -> None:
    def crash() -> None:
        log(f"crashing after {after_s:g} s (STANDIN_CRASH_AFTER_S)")
        os._exit(1)

    timer = threading.Timer(after_s, crash)
    timer.daemon = True
    timer.start()


def _log_progress(engine: Engine) -> None:
    """STANDIN_LOAD_LOG_LINES lines spread over the load, as a real engine's loading logs fill its log."""
    lines = engine.behaviour.load_log_lines

    def talk() -> None:
        for n in range(1, lines + 1):
            time.sleep(max(engine.loaded_at - time.monotonic(), 0) / (lines - n + 1))
            log(f"loading {engine.name}: step {n} of {lines}, weights and caches being laid out")

    if lines:
        threading.Thread(target=talk, daemon=True).start()


def _announce_loaded(engine: Engine) -> None:
    def wait() -> None:
        time.sleep(max(engine.loaded_at - time.monotonic(), 0))
        log(f"model {engine.name} loaded; ready")

    if not engine.behaviour.never_healthy:
        threading.Thread(target=wait, daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    # The simulator sets STANDIN_PARENT_PID: if it dies without stopping its
    # containers (SIGKILL, a killed test run), its stand-ins must not outlive it.
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log("the simulator that started this stand-in is gone: exiting")
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    rest = list(sys.argv[1:] if argv is None else argv)
    bind: str | None = None
    worker = False
    while rest:
        if rest[0] == "--bind" and len(rest) > 1:
            bind, rest = rest[1], rest[2:]
        elif rest[0].startswith("--bind="):
            bind, rest = rest[0].split("=", 1)[1], rest[1:]
        elif rest[0] == "--worker":
            worker, rest = True, rest[1:]
        else:
            if rest[0] == "--":
                rest = rest[1:]
            break
    started = time.monotonic()
    shown = os.environ.get("STANDIN_LOG_ENV")
    if shown:  # an engine that prints a variable of its environment at start, as engines at debug level do
        log(f"environment: {shown}={os.environ.get(shown, '')}")
    behaviour = Behaviour.from_env(dict(os.environ))
    refused = engine_refusal(rest, behaviour.version, behaviour.parser)
    if refused is not None:
        status, text = refused
        sys.stderr.write(text)
        sys.stderr.flush()
        return status
    args = scan_engine_argv(engine_argv(rest))
    signal.signal(signal.SIGTERM, _on_sigterm)
    if behaviour.crash_after_s is not None:
        _crash_later(behaviour.crash_after_s)
    if os.environ.get("STANDIN_PARENT_PID", "").isdigit():
        _exit_with_parent(int(os.environ["STANDIN_PARENT_PID"]))
    try:
        if worker:
            node = ray_worker(rest)
            if node is not None:
                join(node, dict(os.environ), log)  # a Ray worker's node: joins its head, never returns
            log(f"worker rank of {args.served_name} started; no HTTP")
            while True:
                time.sleep(3600)
        head = ray_head(rest)
        if head is not None:
            # The Ray head's script: `vllm serve` only once every node joined (the GCS stays up meanwhile).
            try:
                wait_for_nodes(head, bind or head.address, log)  # its accept thread keeps the GCS up
            except ScriptFailedError as exc:
                sys.stderr.write(exc.stderr)
                sys.stderr.flush()
                return exc.status
            started = time.monotonic()  # `vllm serve` starts only now: its load is counted from here
        time.sleep(behaviour.port_delay_s)
        host = bind or args.host
        try:
            server = StandinServer((host, args.port), Engine(args, behaviour, started, rest))
        except OSError as exc:
            log(f"cannot listen on {host}:{args.port}: {exc}")
            return 1
        log(f"serving {args.served_name} on {host}:{args.port}; loading for {behaviour.load_s:g} s")
        _log_progress(server.engine)
        _announce_loaded(server.engine)
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            server.server_close()
    except SystemExit:
        log("SIGTERM: stopping")
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
