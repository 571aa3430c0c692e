"""The program a sending host runs to push model files to another host with rsync, for the control node.

Host-to-host staging (`reconciler/execute/staging.py`) reaches the sender with `ssh -A` and runs this
script with the host's python3 (3.8+, stdlib only). It reads one JSON line on stdin:

    {"argv": [rsync argv with the @KNOWN_HOSTS@ and @FILES_FROM@ tokens], "known_hosts": "pinned lines",
     "files": ["relative/path", ...]}

writes the receiver's pinned known_hosts lines and the file list into a fresh 0700 folder, runs rsync
with the tokens replaced by those files' paths (its stdout and stderr are the script's: rsync's progress
reaches the control node as it comes), then removes the folder and exits with rsync's exit status (127
when there is no rsync). The folder is removed whatever happens.

The rest of stdin is watched: it ends when the control node's ssh goes away (staging cancelled, the
control node's link cut, the daemon stopped), and then rsync is stopped (SIGTERM to its process group,
SIGKILL 5 s later) instead of running on with nobody reading it; so it is when the script itself gets
SIGTERM, SIGHUP or SIGINT. rsync keeps what it had in its partial
folder when terminated by a signal, so the next run resumes from there.
"""

from __future__ import annotations

RELAY_MARKER = "lanes-stage-relay"
KNOWN_HOSTS_SLOT = "@KNOWN_HOSTS@"
FILES_FROM_SLOT = "@FILES_FROM@"

RELAY_SCRIPT = r"""
import json, os, shutil, signal, subprocess, sys, tempfile, threading, time


def stop(proc):
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        deadline = time.time() + wait
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None:
            return


def first_line():
    # Raw reads on fd 0 (no buffered stdin object): the watcher thread below reads the same fd later.
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def main():
    line = first_line()
    try:
        req = json.loads(line.decode("utf-8"))
        argv, known, files = req["argv"], req["known_hosts"], req["files"]
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("lanes-stage-relay: bad request: %s\n" % e)
        return 2
    folder = tempfile.mkdtemp(prefix="lanes-stage-")
    try:
        kh = os.path.join(folder, "known_hosts")
        fl = os.path.join(folder, "files")
        with open(kh, "w") as f:
            f.write(known)
        with open(fl, "w") as f:
            f.write("".join(p + "\n" for p in files))
        argv = [a.replace("@KH@", kh).replace("@FL@", fl) for a in argv]
        env = dict(os.environ, LC_ALL="C")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as e:
            sys.stderr.write("lanes-stage-relay: cannot run %s: %s\n" % (argv[0], e))
            return 127

        def watch():
            while os.read(0, 4096):
                pass
            if proc.poll() is None:
                # Stop first, then say so: with the control node gone, sshd has closed our stderr too, and
                # the write fails (EPIPE); had it come first, rsync would run on.
                stop(proc)
                try:
                    sys.stderr.write("lanes-stage-relay: the control node went away: rsync stopped\n")
                    sys.stderr.flush()
                except OSError:
                    pass

        def on_signal(signum, frame):
            stop(proc)
            shutil.rmtree(folder, ignore_errors=True)
            os._exit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, on_signal)
        threading.Thread(target=watch, daemon=True).start()
        code = proc.wait()
        return code if code >= 0 else 128 - code  # killed by a signal: the shell convention
    finally:
        shutil.rmtree(folder, ignore_errors=True)


code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # not sys.exit: the watcher thread may still be blocked reading stdin
""".replace("@KH@", KNOWN_HOSTS_SLOT).replace("@FL@", FILES_FROM_SLOT)
