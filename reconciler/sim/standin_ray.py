"""The Ray side of a vLLM Ray lane, as the stand-in plays it: the head waits for its nodes, workers join.

A Ray lane's head runs lanes' fixed `/bin/sh -c` script (`reconciler.engines.vllm.RAY_HEAD_SCRIPT`):
`ray start --head` with the GCS on `--port=P`, then a check that counts live nodes until every rank's
node has joined, printing `lanes: N of N Ray nodes joined after T s`, and only then `vllm serve`. If
they do not all join within the time the script was given, the check exits 1 with `lanes: only K of N
Ray nodes joined in T s` on stderr, and `vllm serve` never runs. A worker runs `ray start --address
HEAD:P ... --block` and stays up as a node of the head's cluster.

The stand-in does the same with a plain TCP socket for the GCS: the head listens on P, counts itself
and every worker connected to it as live nodes, and proceeds or exits exactly as the script would; a
worker connects (retrying while the head is not up yet, as a Ray node does) and holds the connection
as its node's life. So a Ray head whose workers never join never becomes ready. Stdlib only.

The head's address in a worker's `--address` is the head's data-plane address. Simulated hosts live on
loopback addresses of their own, so the simulator hands each stand-in the fleet's addresses
(STANDIN_ADDRESSES, "ADDRESS=SIMULATED ..."): a rendered address maps to the host that holds it; on
the rig, where the data plane is real, there is no map and the address is used as rendered.
"""

from __future__ import annotations

import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

RAY_HEAD_ARGV0 = "lanes-ray-head"
"""$0 of the head's script (reconciler.engines.vllm.RAY_HEAD_ARGV0; the stand-in imports no lanes module)."""
HEAD_POSITIONALS = 13
"""$1..$13 of the script: address, nodes to wait for, seconds, ten `ray start` port flags; then "$@"."""
ADDRESSES_ENV = "STANDIN_ADDRESSES"
CONNECT_RETRY_S = 0.2


@dataclass(frozen=True)
class RayHead:
    address: str
    nodes: int
    timeout: str
    """As the script got it: the give-up line quotes it as text."""
    gcs_port: int
    serve: tuple[str, ...]
    """`vllm serve ...`, what the script execs once every node joined."""


@dataclass(frozen=True)
class RayWorker:
    head: str
    gcs_port: int
    node_ip: str


def ray_head(argv: Sequence[str]) -> RayHead | None:
    """The head's parameters when `argv` is lanes' Ray head script with its positional parameters."""
    if len(argv) <= 3 + HEAD_POSITIONALS or list(argv[:2]) != ["/bin/sh", "-c"] or argv[3] != RAY_HEAD_ARGV0:
        return None
    params = list(argv[4 : 4 + HEAD_POSITIONALS])
    gcs = [p.split("=", 1)[1] for p in params[3:] if p.startswith("--port=")]
    try:
        nodes, port = int(params[1]), int(gcs[0]) if gcs else -1
        float(params[2])
    except ValueError:
        return None
    if port < 0:
        return None
    return RayHead(params[0], nodes, params[2], port, tuple(argv[4 + HEAD_POSITIONALS :]))


def ray_worker(argv: Sequence[str]) -> RayWorker | None:
    """A worker node's `ray start --address HOST:PORT --node-ip-address IP ...`."""
    if list(argv[:2]) != ["ray", "start"] or "--head" in argv:
        return None
    values: dict[str, str] = {}
    for i, word in enumerate(argv):
        flag, eq, inline = word.partition("=")
        if flag in ("--address", "--node-ip-address"):
            values[flag] = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    host, _, port = values.get("--address", "").rpartition(":")
    if not host or not port.isdigit():
        return None
    return RayWorker(host, int(port), values.get("--node-ip-address", ""))


def engine_argv(argv: Sequence[str]) -> Sequence[str]:
    """The engine's own command line: a Ray head's `vllm serve ...`, not the `ray start` flags before it
    (whose `--port=` is the GCS's), else the argv as it is."""
    head = ray_head(argv)
    return head.serve if head is not None else argv


def simulated(address: str, env: dict[str, str]) -> str:
    """Where `address` is reached in this simulation (itself, without a map or outside it)."""
    for pair in env.get(ADDRESSES_ENV, "").split():
        rendered, _, sim = pair.partition("=")
        if rendered == address and sim:
            return sim
    return address


class Gcs:
    """The head's GCS port: a worker node is a connection that said which node it is, live while it stays open."""

    def __init__(self, bind: str, port: int) -> None:
        self.server = socket.create_server((bind, port))  # OSError: the port is taken, as `ray start` fails
        self.nodes: dict[socket.socket, bool] = {}
        """Every open connection, and whether it registered a node (a bare connect, a port probe, is none)."""
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.nodes[conn] = False

    def alive(self) -> int:
        """The head's own node and every registered worker node whose connection is still open."""
        with self.lock:
            readable = select.select(list(self.nodes), [], [], 0)[0] if self.nodes else []
            for conn in readable:
                while True:  # drain what it said: a node that registered and left at once is gone
                    try:
                        said = conn.recv(4096)
                    except OSError:
                        said = b""
                    if not said:  # readable and empty: the node went away
                        del self.nodes[conn]
                        conn.close()
                        break
                    self.nodes[conn] = True
                    if not select.select([conn], [], [], 0)[0]:
                        break
            return 1 + sum(self.nodes.values())


class ScriptFailedError(Exception):
    """The head's script ended before `vllm serve`: its exit status and what it wrote to stderr."""

    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(stderr)
        self.status = status
        self.stderr = stderr


def wait_for_nodes(head: RayHead, bind: str, log: Callable[[str], None]) -> Gcs:
    """`ray start --head`, then the join check of the head's script: returns when every node joined.

    Ends as the script would (ScriptFailedError): 1 with the check's own sentence when the nodes did not
    all join in time, 1 when the GCS port cannot be had. The GCS stays up (the returned object) for the
    lane's life."""
    try:
        gcs = Gcs(bind, head.gcs_port)
    except OSError as exc:
        raise ScriptFailedError(1, f"ray start --head: cannot listen on {bind}:{head.gcs_port}: {exc}\n") from exc
    log(f"ray start --head: GCS on {bind}:{head.gcs_port}, waiting for {head.nodes} nodes")
    deadline = time.monotonic() + float(head.timeout)
    t0 = time.monotonic()
    while True:
        alive = gcs.alive()
        if alive >= head.nodes:
            # The very line RAY_NODES_ALIVE prints, which the readiness gate reads as `ray_join`.
            print(f"lanes: {alive} of {head.nodes} Ray nodes joined after {time.monotonic() - t0:.1f} s")
            sys.stdout.flush()
            return gcs
        if time.monotonic() > deadline:
            # sys.exit(text) in RAY_NODES_ALIVE: the text on stderr, exit status 1.
            said = f"lanes: only {alive} of {head.nodes} Ray nodes joined in {head.timeout} s\n"
            raise ScriptFailedError(1, said)
        time.sleep(min(0.1, max(deadline - time.monotonic(), 0.0)))


def join(worker: RayWorker, env: dict[str, str], log: Callable[[str], None]) -> None:
    """A worker node's life: reach the head's GCS (retrying until it listens), stay joined; never returns."""
    target = simulated(worker.head, env)
    said = False
    while True:
        try:
            conn = socket.create_connection((target, worker.gcs_port), timeout=5)
        except OSError as exc:
            if not said:
                log(f"ray start: GCS at {worker.head}:{worker.gcs_port} not reachable yet ({exc}); retrying")
                said = True
            time.sleep(CONNECT_RETRY_S)
            continue
        try:
            with conn:
                conn.sendall(f"node {worker.node_ip}\n".encode())
                log(f"ray start: node {worker.node_ip or '?'} joined the cluster at {worker.head}:{worker.gcs_port}")
                conn.settimeout(None)
                while conn.recv(4096):
                    pass
        except OSError:
            pass
        log("ray start: lost the GCS; reconnecting")
        said = False


def address_map(pairs: Mapping[str, str]) -> str:
    """STANDIN_ADDRESSES's value for `rendered address -> simulated address`."""
    return " ".join(f"{a}={s}" for a, s in sorted(pairs.items()))
