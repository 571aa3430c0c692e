"""The bounds of a probe session (`probe_serve.py`), apart so the program's text (`probe_script`) can paste
them without importing the protocol module (which imports the command builders, which import the program)."""

from __future__ import annotations

SERVE_MODE = "serve"
"""The launcher's mode for a session (beside `run` and `install`)."""

REQUEST_KEYS = ("disk_path", "known", "lease_file", "model_paths")
"""Exactly these keys, no others: the program refuses a request with a key it does not know (a newer control
node would run a newer program: its hash, hence its name, differs)."""

REQUEST_MAX_BYTES = 1 << 20
"""The longest request line the program reads before it gives up (exit 2). A request is the known digest,
two paths and the model paths of the host's lanes: a few hundred bytes; at PATH_MAX (4,096 bytes) each,
250 model paths would still fit. The control node refuses to send a longer one."""

ANSWER_MAX_BYTES = 4 << 20
"""The longest answer line the control node reads before it closes the session. A whole answer is about
5 KB on a Spark (bench/README.md: 4,854 bytes), an unchanged one 0.6 KB; it grows with containers (about
0.5-1 KB each with their labels) and model paths. 4 MiB holds some thousands of containers, far beyond
what one GB10 runs, while a broken or hostile host cannot make the daemon hold more than 4 MiB per probe in
flight (the cycle probes at most `concurrency` hosts at once)."""

IDLE_EXIT_S = 6 * 3600
"""The program exits after this long without a request. sshd closes its stdin when the connection goes, so
this is only the backstop for a connection that died without a word on a path where sshd's own keepalive
(TCPKeepAlive: about two hours with the kernel's defaults) did not notice: a forgotten program must not sit
on a host for ever. Six hours is far longer than any resync interval, and the control node never uses a
session idle for `SESSION_MAX_IDLE_S`, so a live daemon never meets a program that just left."""

SESSION_MAX_IDLE_S = 3600.0
"""The control node opens a fresh session instead of using one idle for longer than this: well under
`IDLE_EXIT_S`, so a request is never written to a program that timed out on its own (its answer would be an
EOF, and the host would read unreachable for a probe that did nothing wrong)."""
