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
  the same line, so one string serves them all;
- the connection's options object (4.5 KB with its parsed config, kwargs and algorithm lists) and the empty
  trust sets its known_hosts match left (`share_options`).

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


_SESSION_DEFAULTS = (
    "command",
    "subsystem",
    "env",
    "send_env",
    "request_pty",
    "term_type",
    "term_size",
    "term_modes",
    "x11_forwarding",
    "x11_display",
    "x11_auth_path",
    "x11_single_connection",
    "encoding",
    "errors",
    "window",
    "max_pktsize",
)
"""What an open client connection still reads of its options: a new session's defaults (asyncssh 2.24
`SSHClientConnection.create_session`, the only reader of `_options` once authentication is done: the others
are `_connection_made`, host-based auth and `SSHAcceptor.update`, none of which runs on an open client)."""

_ALGS = ("_kex_algs", "_enc_algs", "_mac_algs", "_cmp_algs", "_sig_algs")
"""The algorithm lists a connection copies from its options at `SSHConnection.__init__`, read again at each
rekey's KEXINIT: equal lists for every connection made with the same settings."""

_EMPTY_AFTER_MATCH = ("_trusted_ca_keys", "_revoked_host_keys", "_x509_revoked_certs")
"""Sets `_match_known_hosts` assigns once at connect and the host key checks only read (`in`, truth) after it,
at a rekey too: when empty, one shared frozenset serves every connection. `_trusted_host_keys` is not among
them: it holds the host's own pinned key."""

_CREDENTIALS = ("client_keys", "password", "passphrase", "pkcs11_pin", "client_host_keypairs")
"""What an options object holds to authenticate (private keys among them), read by nothing once a connection
is authenticated: cleared from the shared object, which outlives its connection (a key rotated out of the
daemon's files must not stay in its memory for good). `kwargs`, the arguments it was made from, too."""

_SHARED: dict[str, tuple[asyncssh.SSHClientConnectionOptions, tuple[object, ...]]] = {}
"""One options object and one set of algorithm lists per distinct session defaults and lists: a daemon
makes every connection with the same settings, so this holds one entry; bounded all the same."""
_SHARED_MAX = 16
_EMPTY: frozenset[object] = frozenset()


def share_options(conn: asyncssh.SSHClientConnection) -> bool:
    """Point an authenticated `conn` at options and algorithm lists equal to its own that other connections
    already hold, and its empty trust sets at one frozenset; False (nothing done) before authentication."""
    state = vars(conn)
    if not state.get("_auth_complete"):
        return False
    options = state["_options"]
    algs = tuple(state[name] for name in _ALGS)
    # repr, not hash: env and term_modes are dicts. Equal reprs of these plain values mean equal values.
    key = repr((tuple(getattr(options, name) for name in _SESSION_DEFAULTS), algs))
    shared = _SHARED.get(key)
    if shared is None and len(_SHARED) < _SHARED_MAX:
        for name in _CREDENTIALS:
            if hasattr(options, name):
                setattr(options, name, None)
        options.kwargs = {}
        shared = _SHARED[key] = (options, algs)
    if shared is not None:
        conn._options = shared[0]
        for name, value in zip(_ALGS, shared[1], strict=True):
            setattr(conn, name, value)
    for name in _EMPTY_AFTER_MATCH:
        if state.get(name) == set():
            setattr(conn, name, _EMPTY)
    return True


@functools.lru_cache(maxsize=8)
def shared_line(argv: tuple[str, ...]) -> str:
    """One command-line string per distinct argv of a long-lived session (one per state folder on the hosts)."""
    return shlex.join(argv)
