"""A TCP rendezvous of a lane's ranks, as torch.distributed's store does it, then the engine stand-in.

`python3 -m reconciler.sim.rendezvous -- COMMAND...` reads the variables
lanes gives every rank of a multi-node lane (NNODES, NODE_RANK,
MASTER_ADDR, MASTER_PORT: the generic renderer's, what torchrun-style
launchers read). Rank 0 listens on MASTER_ADDR itself, which only works if
that address is on its own host; every other rank connects to it and says
its rank; rank 0 logs each peer with the address it came from and lets them
all go on; then every rank execs COMMAND. On the rig this shows that ranks
meet on the data plane and on no other network. stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Sequence

TIMEOUT_S = float(os.environ.get("RENDEZVOUS_TIMEOUT_S", "60"))


def log(text: str) -> None:
    print(f"rendezvous: {text}", flush=True)


def head(address: str, port: int, peers: int) -> None:
    with socket.create_server((address, port), reuse_port=False) as server:
        server.settimeout(TIMEOUT_S)
        joined = []
        for _ in range(peers):
            conn, (source, _) = server.accept()
            rank = conn.makefile().readline().strip()
            log(f"rank {rank} joined from {source}")
            joined.append(conn)
        for conn in joined:
            conn.sendall(b"go\n")
            conn.close()
    log(f"all {peers + 1} ranks met on {address}:{port}")


def peer(address: str, port: int, rank: int) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            with socket.create_connection((address, port), timeout=5) as conn:
                local = conn.getsockname()[0]
                conn.sendall(f"{rank}\n".encode())
                if conn.makefile().readline().strip() == "go":
                    log(f"rank {rank} met rank 0 at {address}:{port} from {local}")
                    return
        except OSError as exc:
            if time.monotonic() > deadline:
                sys.exit(f"rendezvous: rank {rank} could not reach rank 0 at {address}:{port}: {exc}")
        time.sleep(0.2)


def main(argv: Sequence[str]) -> None:
    args = list(argv)
    if args[:1] == ["--"]:
        args = args[1:]
    nodes, rank = int(os.environ["NNODES"]), int(os.environ["NODE_RANK"])
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if rank == 0:
        head(address, port, nodes - 1)
    else:
        peer(address, port, rank)
    if args:
        os.execvp(args[0], args)  # noqa: S606 - the argv list the lane gave, as an entrypoint runs it


if __name__ == "__main__":
    main(sys.argv[1:])
