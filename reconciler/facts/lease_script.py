"""The program a host runs to take or give back the reconciler's lease on it.

Two daemons (or a daemon and a person running `lanes apply`) must not change
the same Spark at once. The lease lives on the host itself, so whoever can
reach the host sees it; an `flock` on a side file makes read-check-write
atomic against a concurrent acquire, and an expiry time means a crashed
holder does not lock a host forever.

Exit status: 0 done, 3 held by another owner, 2 bad usage. The one line of
JSON on stdout is `{"ok": bool, "lease": {...} | null}` (for a conflict the
lease shown is the holder's). Runs on the host's python3 (3.8+, stdlib only).
"""

from __future__ import annotations

LEASE_CONFLICT_EXIT = 3

LEASE_SCRIPT = r"""
import fcntl, json, os, sys, time


def read(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write(path, lease):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(lease, f, sort_keys=True)
    os.replace(tmp, path)  # a reader never sees half a lease


def num(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def reply(ok, lease, status):
    sys.stdout.write(json.dumps({"ok": ok, "lease": lease}, sort_keys=True) + "\n")
    sys.exit(status)


def main(argv):
    if len(argv) != 4 or argv[0] not in ("acquire", "release"):
        sys.stderr.write("usage: lanes-lease acquire|release FILE OWNER TTL_S\n")
        sys.exit(2)
    action, path, owner = argv[0], argv[1], argv[2]
    try:
        ttl = int(argv[3])
    except ValueError:
        sys.stderr.write("lanes-lease: TTL_S must be an integer\n")
        sys.exit(2)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o700, exist_ok=True)
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    now = time.time()
    lease = read(path)
    live = lease is not None and num(lease.get("expires")) > now
    mine = lease is not None and lease.get("owner") == owner
    if action == "acquire":
        if live and not mine:
            reply(False, lease, 3)
        # A renewal keeps the original acquisition time: it is one holding.
        acquired = (num(lease.get("acquired")) or now) if (live and mine) else now
        new = {"owner": owner, "acquired": acquired, "expires": now + ttl}
        write(path, new)
        reply(True, new, 0)
    if live and not mine:
        reply(False, lease, 3)
    if mine:
        os.remove(path)
    # Not holding a lease that someone else let expire is the same as released.
    reply(True, None, 0)


main(sys.argv[2:])
"""
