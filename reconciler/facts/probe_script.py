"""The program a host runs to report every fact the reconciler needs, in one round trip.

A reconcile cycle costs one SSH exec per host, so everything the planner
needs (managed containers, memory, disk, model presence, the lease, and the
host facts of `probe_host_script`: OS, driver, links, RDMA, disk space under
the model and HF paths) is gathered by this one self-contained script and printed as a single JSON
object. It runs with the host's own `python3` (3.8 or later, stdlib only:
Sparks ship Ubuntu's python3, nothing else can be assumed) and must never
crash: a missing docker, file or path is recorded into `errors` so the
parser still gets every fact that could be read.

The script is kept as a string here (not a file read at run time) so the
pure core stays free of I/O; `tests/facts` runs it for real.
"""

from __future__ import annotations

from reconciler.facts.labels import LABEL_MANAGED, MANAGED_VALUE
from reconciler.facts.probe_bounds import IDLE_EXIT_S, REQUEST_KEYS, REQUEST_MAX_BYTES
from reconciler.facts.probe_host_script import HOST_SOURCE

PROBE_VERSION = 3
"""2: the `host` section (host facts) was added. 3: the program is installed on the host under its hash
(`probe_program`), `--known DIGEST` makes an unchanged host answer with the digest and its volatile figures
(`probe_digest`), meminfo carries only the lines the parser reads and nvidia-smi only its header line.
The control node and the host's installed copy never disagree (the copy is named by its hash), but
recorded outputs and the simulator must say which shape they are."""

_SOURCE = r"""
import hashlib, json, os, select, socket, stat, subprocess, sys, time

MANAGED = "@MANAGED@"


def run(argv, errors, state):
    # One missing docker is one error line, not one per docker call.
    if state.get("missing"):
        return None
    try:
        # stdin=DEVNULL: in a session, stdin carries the control node's requests, never a child's input.
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
    except FileNotFoundError:
        state["missing"] = True
        errors.append("%s: not found" % argv[0])
        return None
    except subprocess.TimeoutExpired:
        errors.append("%s: timed out" % " ".join(argv[:2]))
        return None
    except OSError as e:
        errors.append("%s: %s" % (" ".join(argv[:2]), e))
        return None
    if p.returncode != 0:
        tail = p.stderr.strip().splitlines()[-3:]
        errors.append("%s: exit %d: %s" % (" ".join(argv[:2]), p.returncode, " ".join(tail)))
    return p.stdout


def container(d):
    cfg = d.get("Config") or {}
    st = d.get("State") or {}
    name = d.get("Name") or ""
    if name.startswith("/"):
        name = name[1:]
    return {"name": name, "id": d.get("Id") or d.get("ID") or "",
            "image": cfg.get("Image") or d.get("ImageName") or "",
            "image_id": d.get("Image") or "", "state": st.get("Status") or "",
            "exit_code": st.get("ExitCode"), "started_at": st.get("StartedAt"),
            "labels": cfg.get("Labels") or {}}


def docker_facts(errors):
    state = {}
    out = run(["docker", "ps", "-a", "--filter", "label=" + MANAGED, "-q"], errors, state)
    ids = sorted(set((out or "").split()))
    managed = []
    if ids:
        raw = run(["docker", "inspect"] + ids, errors, state)
        try:
            managed = [container(d) for d in json.loads(raw or "[]")]
        except ValueError:
            errors.append("docker inspect: output is not JSON")
    unmanaged = []
    raw = run(["docker", "ps", "-a", "--format", "{{json .}}"], errors, state)
    rows = []
    for line in (raw or "").splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        # docker prints one object a line; podman may print one array: take both, skip anything else.
        rows.extend(x for x in (parsed if isinstance(parsed, list) else [parsed]) if isinstance(x, dict))
    for d in rows:
        cid = d.get("ID") or d.get("Id") or ""
        labels = d.get("Labels") or ""
        if isinstance(labels, dict):
            labels = ",".join("%s=%s" % kv for kv in labels.items())
        # ps shows 12-character ids, inspect full ones: compare by prefix.
        if MANAGED in labels.split(",") or any(i.startswith(cid) or cid.startswith(i)
                                               for i in ids if cid):
            continue
        names = d.get("Names") or ""
        if isinstance(names, list):
            names = names[0] if names else ""
        unmanaged.append({"name": names, "image": d.get("Image") or "",
                          "state": d.get("State") or ""})
    return managed, unmanaged


def listening(errors):
    ports = set()
    for fn in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(fn) as f:
                lines = f.read().splitlines()[1:]
        except OSError as e:
            if fn.endswith("tcp"):  # tcp6 is absent when IPv6 is off
                errors.append("%s: %s" % (fn, e.strerror))
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == "0A":  # 0A is TCP_LISTEN
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


def tree_bytes(path):
    root = os.path.realpath(path)
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    seen = set()
    total = 0
    for dirpath, _dirs, files in os.walk(root, followlinks=False):
        for fn in files:
            p = os.path.join(dirpath, fn)
            try:
                # A symlink is counted only when it stays inside the tree
                # (HF snapshots point into ../blobs); inode dedup keeps a
                # blob and its snapshot link from counting twice.
                if os.path.islink(p):
                    real = os.path.realpath(p)
                    if not real.startswith(root + os.sep):
                        continue
                s = os.stat(p)
            except OSError:
                continue
            if stat.S_ISREG(s.st_mode) and (s.st_dev, s.st_ino) not in seen:
                seen.add((s.st_dev, s.st_ino))
                total += s.st_size
    return total


def models(paths, errors):
    res = {}
    for p in paths:
        try:
            if os.path.exists(p):
                res[p] = {"exists": True, "bytes": tree_bytes(p)}
            else:
                res[p] = {"exists": False, "bytes": 0}
        except OSError as e:
            errors.append("model %s: %s" % (p, e))
            res[p] = {"exists": os.path.exists(p), "bytes": 0}
    return res


def disk(path, errors):
    try:
        s = os.statvfs(path)
    except OSError as e:
        errors.append("disk %s: %s" % (path, e.strerror))
        return None
    return {"path": path, "total": s.f_blocks * s.f_frsize, "free": s.f_bavail * s.f_frsize}


def lease(path, errors):
    if not path:
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        errors.append("lease %s: %s" % (path, e))
        return None
    if not isinstance(data, dict):
        errors.append("lease %s: not a JSON object" % path)
        return None
    return data


# The lines of /proc/meminfo the control node reads (facts/parse.py parse_meminfo); the rest of the
# file (some 50 lines) would cross the wire every cycle for nothing.
MEMINFO_KEYS = ("MemTotal", "MemFree", "MemAvailable", "Cached")


def meminfo(errors):
    try:
        with open("/proc/meminfo") as f:
            text = f.read()
    except OSError as e:
        errors.append("/proc/meminfo: %s" % e.strerror)
        return None
    return "".join(line + "\n" for line in text.splitlines() if line.split(":", 1)[0] in MEMINFO_KEYS)


# The same split as reconciler/facts/probe_digest.py (this program cannot import it; tests/facts checks
# that both give the same digest): what moves on every read is sent always and never digested.
VOLATILE_KEYS = ("time", "meminfo", "disk")
VOLATILE_HOST_KEYS = ("disks",)
ANSWER_KEYS = ("digest", "unchanged")


def fact_digest(out):
    stable = dict((k, v) for k, v in out.items() if k not in VOLATILE_KEYS and k not in ANSWER_KEYS)
    if isinstance(stable.get("host"), dict):
        stable["host"] = dict((k, v) for k, v in stable["host"].items() if k not in VOLATILE_HOST_KEYS)
    text = json.dumps(stable, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def answer(out, known):
    digest = fact_digest(out)
    if known is not None and known == digest:
        # Nothing the daemon holds has changed: the digest and the volatile figures only.
        host = out.get("host") if isinstance(out.get("host"), dict) else {}
        short = {"probe_version": out["probe_version"], "digest": digest, "unchanged": True,
                 "disks": host.get("disks")}
        for k in VOLATILE_KEYS:
            short[k] = out.get(k)
        return short
    out["digest"] = digest
    return out


def parse_args(argv, errors):
    lease_file, disk_path, paths, known = None, "/", [], None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            paths = argv[i + 1:]
            break
        if a in ("--lease-file", "--disk-path", "--known") and i + 1 < len(argv):
            if a == "--lease-file":
                lease_file = argv[i + 1]
            elif a == "--known":
                known = argv[i + 1]
            else:
                disk_path = argv[i + 1]
            i += 2
            continue
        errors.append("probe: unexpected argument %r" % a)
        i += 1
    return lease_file, disk_path, paths, known


def gather(lease_file, disk_path, paths, known, errors):
    out = {"probe_version": @PROBE_VERSION@, "hostname": socket.gethostname(), "time": time.time(),
           "containers": [], "unmanaged": [], "listening": [], "meminfo": None,
           "disk": None, "models": {}, "lease": None, "host": None, "errors": errors}
    steps = [
        ("docker", lambda: out.update(zip(("containers", "unmanaged"), docker_facts(errors)))),
        ("listening", lambda: out.update(listening=listening(errors))),
        ("meminfo", lambda: out.update(meminfo=meminfo(errors))),
        ("disk", lambda: out.update(disk=disk(disk_path, errors))),
        ("models", lambda: out.update(models=models(paths, errors))),
        ("lease", lambda: out.update(lease=lease(lease_file, errors))),
        # Disk space under every model path and the HF cache (disk_path), each once.
        ("host", lambda: out.update(host=host_facts(list(dict.fromkeys(paths + [disk_path])), errors))),
    ]
    for name, step in steps:
        # Each fact is independent: one failing must not hide the others.
        try:
            step()
        except Exception as e:
            errors.append("%s: %s: %s" % (name, type(e).__name__, e))
    return json.dumps(answer(out, known), sort_keys=True) + "\n"


# A session (reconciler/facts/probe_serve.py): one request line in, one answer line out, until stdin ends.
# The same rules as probe_serve.read_request_line (tests/facts runs both on the same lines); the bounds are
# reconciler/facts/probe_bounds.py's, which say why each has its value.
REQUEST_KEYS = @REQUEST_KEYS@
REQUEST_MAX = @REQUEST_MAX@
IDLE_S = @IDLE_S@


def refuse(why):
    sys.stderr.write("lanes-probe: %s\n" % why)
    sys.stderr.flush()
    sys.exit(2)


def next_request(pending):
    # The next request line (bytes, without its newline), or None at end of stdin or after IDLE_S idle.
    while b"\n" not in pending:
        if len(pending) > REQUEST_MAX:
            refuse("request over %d bytes" % REQUEST_MAX)
        ready, _, _ = select.select([0], [], [], IDLE_S)
        if not ready:
            sys.stderr.write("lanes-probe: no request for %d s, exiting\n" % IDLE_S)
            return None
        chunk = os.read(0, 65536)
        if not chunk:
            return None  # sshd closed stdin: the control node or its connection went away
        pending.extend(chunk)
    at = pending.index(b"\n")
    if at > REQUEST_MAX:
        refuse("request over %d bytes" % REQUEST_MAX)
    line = bytes(pending[:at])
    del pending[:at + 1]
    return line


def read_request(line):
    try:
        req = json.loads(line.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is a ValueError
        refuse("malformed request: not JSON: %s" % e)
    if not isinstance(req, dict) or sorted(req) != list(REQUEST_KEYS):
        refuse("malformed request: not an object of exactly the keys %s" % ", ".join(REQUEST_KEYS))
    known, lease_file, disk_path, paths = req["known"], req["lease_file"], req["disk_path"], req["model_paths"]
    if known is not None and not isinstance(known, str):
        refuse("malformed request: known is neither a string nor null")
    if not isinstance(lease_file, str) or not isinstance(disk_path, str):
        refuse("malformed request: lease_file and disk_path must be strings")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        refuse("malformed request: model_paths must be a list of strings")
    return lease_file, disk_path, paths, known


def serve():
    pending = bytearray()
    while True:
        line = next_request(pending)
        if line is None:
            return
        lease_file, disk_path, paths, known = read_request(line)
        try:
            sys.stdout.write(gather(lease_file, disk_path, paths, known, []))
            sys.stdout.flush()
        except BrokenPipeError:
            return  # the channel closed while the facts were gathered: nobody waits for this answer


def main():
    if sys.argv[2:3] == ["--serve"]:
        serve()
        return
    errors = []
    lease_file, disk_path, paths, known = parse_args(sys.argv[2:], errors)
    sys.stdout.write(gather(lease_file, disk_path, paths, known, errors))


@HOST_SOURCE@

main()
"""

# The label the probe filters on comes from the one labels module; it is pasted into the source
# because the script runs on the host, where it cannot import anything of lanes.
PROBE_SCRIPT = (
    _SOURCE.replace("@MANAGED@", f"{LABEL_MANAGED}={MANAGED_VALUE}")
    .replace("@PROBE_VERSION@", str(PROBE_VERSION))
    .replace("@REQUEST_KEYS@", repr(REQUEST_KEYS))
    .replace("@REQUEST_MAX@", str(REQUEST_MAX_BYTES))
    .replace("@IDLE_S@", str(IDLE_EXIT_S))
    .replace("@HOST_SOURCE@", HOST_SOURCE)
)
