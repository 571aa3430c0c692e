"""The program a host runs to say which of a model's files it holds, and how much of the others.

Staging (`reconciler/execute/staging.py`) asks each receiver, before and
after copying, what it holds of a model's manifest; `lanes model manifest`
asks an origin folder for every file it holds with its size and sha256. One
self-contained script does both, on the host's own `python3` (3.8 or later,
stdlib only, as `probe_script.py`), and prints one JSON object. It never
crashes on a missing or unreadable file: that goes into `errors` (and the
file's state), so the parser always gets an answer.

Arguments are one JSON object, on stdin (a 72-file manifest with its
checksums is too long for a comfortable argv) or as the argument after the
marker:

    {"mode": "check" (default) | "follow" | "hash", "root": "/models/X", "workers": 4,
     "partial_dir": ".lanes-partial", "files": [{"path", "size", "sha256"}...] (check mode only)}

check: every listed file is stat'ed and given a state:
    ok        the size and sha256 are the manifest's
    missing   no file, no partial bytes
    partial   present but smaller than the manifest size, or absent with bytes in the partial dir
    mismatch  the size is the manifest's (or larger) but the sha256 differs (a larger file is not hashed)
Output: {"mode": "check", "root", "exists", "free_bytes", "files": {path: {"state", "size", "partial_bytes"}},
         "hashed": [paths hashed this run], "errors": [...]}

follow: a check of files being copied, hashing each as soon as rsync renames it into place (whole, with the
manifest's size, and another file than the one there before: a file's "not" [inode, ctime_ns] as a check
gave it under "id", null for none, or the one there when the script starts), while the others still copy; then the
answer of a check (same output, mode "check"), the hashes reused. It prints a newline every second while it
waits (the control node ignores them; once it is gone the write fails and the script stops), and waits at
most `deadline_s` (args "deadline_s", "poll_s"). rsync sets a file's times and mode before renaming it into
place (receiver.c finish_transfer, rsync 3.x), so the hash and the stamp hold for the file that stays.

hash: every regular file under root (a symlink counts as the file it points to; symlinked folders are not
entered) except rsync's partial folders and the stamp file, with its size and sha256.
Output: {"mode": "hash", "root", "exists", "free_bytes", "files": [{"path", "size", "sha256"}...] sorted by path,
         "hashed": [...], "errors": [...]}

Where rsync keeps partial files: `--partial-dir=.lanes-partial` is relative, so rsync makes that folder in
*the destination file's own folder* (rsync(1), 3.2.7+, --partial-dir: "create the partial-directory in the
destination file's directory"): the partial of `sub/a.bin` is `<root>/sub/.lanes-partial/a.bin`, which is
where this script looks (not `<root>/.lanes-partial/sub/a.bin`).

The stamp cache `<root>/.lanes-verified.json` maps a path to [size, mtime_ns, ctime_ns, ino, sha256] as
stat'ed around its last hashing; a file whose stat tuple still matches is not hashed again. The inode's
ctime moves on every write to the file and on every chmod or utime, and a process cannot set it back (only
the clock can), so a flipped byte is noticed even when its writer restored mtime; a file replaced by
another (rename over it) has another inode. A file whose stat changes while it is hashed gets no stamp.
The stamp is written as a temporary file renamed into place, under an flock of root itself, merged with
what another check wrote meanwhile (a check keeps the entries of files it was not asked about); where root
is not writable the cache is skipped (every file is hashed) and the error said.

`free_bytes` is statvfs f_bavail * f_frsize (what an unprivileged writer may still use) of root, or of its
nearest existing ancestor when root does not exist yet (where the files will land).

The script is kept as a string here (not read from a file at run time) so the pure core stays free of I/O;
`tests/facts/test_modelcheck_script.py` runs it for real.
"""

from __future__ import annotations

MODELCHECK_MARKER = "lanes-modelcheck"
STAMP_NAME = ".lanes-verified.json"
PARTIAL_DIR = ".lanes-partial"

MODELCHECK_SCRIPT = r"""
import concurrent.futures, fcntl, hashlib, json, os, stat, sys, threading, time

STAMP = "@STAMP@"
CHUNK = 4 << 20


def statkey(st):
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def free_bytes(root, errors):
    path = root
    while True:
        try:
            vfs = os.statvfs(path)
            return vfs.f_bavail * vfs.f_frsize
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        except OSError as e:
            errors.append("statvfs %s: %s" % (path, e))
            return None
    errors.append("statvfs %s: no existing folder on the path" % root)
    return None


def sha256_of(full):
    # Returns (hex, stat key of the file while it was hashed or None if it changed meanwhile).
    h = hashlib.sha256()
    fd = os.open(full, os.O_RDONLY)
    try:
        before = statkey(os.fstat(fd))
        while True:
            block = os.read(fd, CHUNK)
            if not block:
                break
            h.update(block)
        after = statkey(os.fstat(fd))
    finally:
        os.close(fd)
    return h.hexdigest(), (before if before == after else None)


def load_stamp(root, errors):
    try:
        with open(os.path.join(root, STAMP)) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        errors.append("stamp %s: unreadable, every file is hashed: %s" % (STAMP, e))
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 5}


def save_stamp(root, fresh, looked, whole, errors):
    # Under an flock of the folder itself (no extra file in it): two checks at once merge, neither loses the
    # other's entries. `whole`: this run saw every file (hash mode), so entries it did not see are stale.
    path = os.path.join(root, STAMP)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    lock = None
    try:
        lock = os.open(root, os.O_RDONLY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = {} if whole else {k: v for k, v in load_stamp(root, []).items() if k not in looked}
        merged.update(fresh)
        with open(tmp, "w") as f:
            json.dump(merged, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        errors.append("stamp %s: not written (%s): the next check hashes again" % (STAMP, e))
        try:
            os.unlink(tmp)
        except OSError:
            pass
    finally:
        if lock is not None:
            os.close(lock)


class Hasher(object):
    # Hashes what the stamp does not vouch for, `workers` files at a time (hashlib releases the GIL).
    def __init__(self, root, workers, errors):
        self.root, self.errors = root, errors
        self.stamp = load_stamp(root, errors)
        self.fresh = {}
        self.looked = set()
        self.running = {}
        self.hashed = []
        self.lock = threading.Lock()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers))

    def submit(self, path, st):
        self.looked.add(path)
        key = statkey(st)
        entry = self.stamp.get(path)
        if entry is not None and entry[:4] == key:
            done = concurrent.futures.Future()
            done.set_result(entry[4])
            self.fresh[path] = entry
            return done
        if path in self.running and self.running[path][0] == key:
            return self.running[path][1]  # already hashed (or hashing) this run, unchanged since
        future = self.pool.submit(self._hash, path)
        self.running[path] = (key, future)
        return future

    def _hash(self, path):
        try:
            digest, key = sha256_of(os.path.join(self.root, path))
        except OSError as e:
            with self.lock:
                self.errors.append("%s: %s" % (path, e))
            return None
        with self.lock:
            self.hashed.append(path)
            if key is not None:
                self.fresh[path] = key + [digest]
        return digest

    def finish(self, whole=False):
        self.pool.shutdown(wait=True)
        if os.path.isdir(self.root) and any(self.stamp.get(k) != v for k, v in self.fresh.items()):
            save_stamp(self.root, self.fresh, self.looked, whole, self.errors)
        return sorted(self.hashed)


def regular(full):
    # stat follows a symlink: a link to a file counts as that file (an HF snapshot links to blobs).
    try:
        st = os.stat(full)
    except FileNotFoundError:
        return None
    return st if stat.S_ISREG(st.st_mode) else False


def check(root, files, workers, partial_dir, out, hasher=None):
    errors = out["errors"]
    out["exists"] = os.path.isdir(root)
    if hasher is None and out["exists"]:
        hasher = Hasher(root, workers, errors)
    pending = {}
    for item in files:
        path, size = item["path"], int(item["size"])
        full = os.path.join(root, path)
        head, name = os.path.split(full)
        partial = 0
        try:
            partial = os.stat(os.path.join(head, partial_dir, name)).st_size
        except OSError:
            pass
        try:
            st = regular(full)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            st = None
        if st is False:
            errors.append("%s: not a regular file" % path)
            out["files"][path] = {"state": "mismatch", "size": 0, "partial_bytes": partial}
            continue
        if st is None:
            state = "partial" if partial > 0 else "missing"
            out["files"][path] = {"state": state, "size": 0, "partial_bytes": partial}
            continue
        out["files"][path] = {"state": None, "size": st.st_size, "partial_bytes": partial,
                              "id": [st.st_ino, st.st_ctime_ns]}
        if st.st_size < size:
            out["files"][path]["state"] = "partial"
        elif st.st_size > size:
            out["files"][path]["state"] = "mismatch"
        else:
            pending[path] = (hasher.submit(path, st), item["sha256"])
    for path, (future, want) in pending.items():
        digest = future.result()
        out["files"][path]["state"] = "ok" if digest is not None and digest == want else "mismatch"
    if hasher is not None:
        out["hashed"] = hasher.finish()


def listing(root, partial_dir, errors):
    found = []

    def walk_error(e):
        errors.append("%s: %s" % (e.filename, e.strerror))

    for here, dirs, names in os.walk(root, onerror=walk_error):
        dirs[:] = sorted(d for d in dirs if d != partial_dir)
        rel = os.path.relpath(here, root)
        for name in names:
            path = name if rel == "." else os.path.join(rel, name).replace(os.sep, "/")
            if path == STAMP or (rel == "." and name.startswith(STAMP + ".")):
                continue
            try:
                st = regular(os.path.join(here, name))
            except OSError as e:
                errors.append("%s: %s" % (path, e))
                continue
            if st is None:
                errors.append("%s: a broken symlink" % path)
            elif st is False:
                errors.append("%s: not a regular file, left out" % path)
            else:
                found.append((path, st))
    return sorted(found)


def hash_all(root, workers, partial_dir, out):
    errors = out["errors"]
    out["files"] = []
    if not out["exists"]:
        return
    hasher = Hasher(root, workers, errors)
    futures = [(path, st.st_size, hasher.submit(path, st)) for path, st in listing(root, partial_dir, errors)]
    for path, size, future in futures:
        digest = future.result()
        if digest is not None:
            out["files"].append({"path": path, "size": size, "sha256": digest})
    out["hashed"] = hasher.finish(whole=True)


def identity(full):
    try:
        st = os.stat(full)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)


def follow(root, files, workers, partial_dir, poll_s, deadline_s, out):
    # Hash each file as soon as it has its final name, its full size, and is not the file that was there when
    # we started (another inode or ctime): rsync writes elsewhere and renames into place, so a file under its
    # final name is whole. The copies and the hashing overlap; then a check as above, reusing those hashes.
    # A newline every poll tells the control node we are alive; when it has gone the write fails and we stop.
    hasher = Hasher(root, workers, out["errors"])
    # The file each path held before the copy began: given by the caller from its first check (the copy may
    # already have renamed a small file into place by the time this starts), else as found now.
    before = {}
    for item in files:
        old = item.get("not", "now")
        before[item["path"]] = identity(os.path.join(root, item["path"])) if old == "now" else (
            tuple(old) if old else None)
    waiting = {item["path"]: int(item["size"]) for item in files}
    deadline = time.time() + deadline_s
    beat = 0.0
    while waiting and time.time() < deadline:
        for path, size in list(waiting.items()):
            full = os.path.join(root, path)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size == size and identity(full) != before[path]:
                hasher.submit(path, st)
                del waiting[path]
        if time.time() - beat >= 1.0:
            beat = time.time()
            try:
                sys.stdout.write("\n")
                sys.stdout.flush()
            except OSError:
                os._exit(3)
        if waiting:
            time.sleep(poll_s)
    if not os.path.isdir(root):
        hasher = None  # nothing arrived (nothing was hashed): a plain check says so
    check(root, files, workers, partial_dir, out, hasher)


def main():
    raw = sys.argv[2] if len(sys.argv) > 2 else sys.stdin.read()
    try:
        args = json.loads(raw)
        root = os.path.abspath(args["root"])
        mode = args.get("mode", "check")
        workers = int(args.get("workers", 4))
        partial_dir = args.get("partial_dir", "@PARTIAL@")
        files = args.get("files", [])
        poll_s = float(args.get("poll_s", 0.2))
        deadline_s = float(args.get("deadline_s", 3600))
        if mode not in ("check", "hash", "follow") or not isinstance(files, list):
            raise ValueError("mode must be check, hash or follow, files a list")
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("lanes-modelcheck: bad arguments: %s\n" % e)
        sys.exit(2)
    errors = []
    out = {"mode": mode, "root": root, "exists": os.path.isdir(root), "free_bytes": free_bytes(root, errors),
           "files": {}, "hashed": [], "errors": errors}
    if mode == "check":
        check(root, files, workers, partial_dir, out)
    elif mode == "follow":
        out["mode"] = "check"  # the same answer as a check, given later
        follow(root, files, workers, partial_dir, poll_s, deadline_s, out)
    else:
        hash_all(root, workers, partial_dir, out)
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")


main()
""".replace("@STAMP@", STAMP_NAME).replace("@PARTIAL@", PARTIAL_DIR)
