"""What a pooled SSH connection need not hold once it is open (issue 27: the daemon's memory at 1,000 hosts).

The daemon keeps one asyncssh connection and one probe session per host for good, so a few kilobytes
each connection or session holds without need are megabytes at 1,000 hosts (tracemalloc of a 1,000-host
daemon, `bench/profiled_daemon.py --memory`):

- both KEXINIT payloads of the first key exchange (1.4 KB each; asyncssh 2.24 `SSHConnection._client_kexinit`
  and `_server_kexinit`): read only to hash a key exchange, and each exchange, a rekey as well, sets both
  afresh before it hashes them (`_send_kexinit`, `_process_kexinit`), so between exchanges they are dead;
- the server's `server-sig-algs` extension as a set of its own per connection (1.5 KB; `_server_sig_algs`,
  read to choose a signature algorithm at user authentication): every host of a fleet announces the same
  list, so one equal set serves them all;
- a probe session's command line (1.8 KB: the launcher script inline), kept by its channel: every host runs
  the same line, so one string serves them all.

asyncssh gives no public way to drop these; the names are checked (`tests/transport/test_sshlean.py` fails if
an asyncssh release renames them) and a connection whose key exchange is under way is left alone.
"""

from __future__ import annotations

import functools
import shlex

import asyncssh

_SIG_ALGS: dict[frozenset[bytes], set[bytes]] = {}
"""One set per distinct `server-sig-algs` list. A fleet announces one or a few; bounded all the same, as the
list is the host's to choose (a host past the bound keeps its own set, as before)."""
_SIG_ALGS_MAX = 16


def shed_handshake_state(conn: asyncssh.SSHClientConnection) -> bool:
    """Drop what the finished handshake left on `conn`; False (nothing done) while a key exchange runs."""
    state = vars(conn)
    if state.get("_kex") is not None or state.get("_kexinit_sent") or not state.get("_kex_complete"):
        return False
    conn._client_kexinit = b""
    conn._server_kexinit = b""
    algs = state.get("_server_sig_algs")
    if isinstance(algs, set):
        key = frozenset(algs)
        shared = _SIG_ALGS.get(key)
        if shared is None and len(_SIG_ALGS) < _SIG_ALGS_MAX:
            shared = _SIG_ALGS[key] = algs
        if shared is not None:
            conn._server_sig_algs = shared
    return True


@functools.lru_cache(maxsize=8)
def shared_line(argv: tuple[str, ...]) -> str:
    """One command-line string per distinct argv of a long-lived session (one per state folder on the hosts)."""
    return shlex.join(argv)
