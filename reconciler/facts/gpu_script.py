"""The wait for a free GPU before any rank of a lane starts on a host.

An engine that starts while a previous one still holds the GPU dies with
"CUDA-capable device(s) is/are busy or unavailable", and the lane's other
ranks then hang in torch.distributed's rendezvous (sparkrun-recipes'
launch-sgl-dsv41.sh: after `docker rm -f` it polls `nvidia-smi
--query-compute-apps=pid` on every node until no process holds the GPU).
Stopping a container returns when its processes have exited, but the driver
may still be tearing down their CUDA contexts.

The script polls the same nvidia-smi query. A compute process inside a
container that still runs under lanes (another lane sharing the host, as
host-sharing allows) does not count: its container id is in the process's
cgroup path. Everything else (a stopped rank's lingering context, someone's
notebook) is waited for, up to a timeout, and then named. A host without
nvidia-smi has no GPU to wait for. stdlib only, Python 3.8+, never a
traceback: one JSON line on stdout.
"""

from __future__ import annotations

from reconciler.facts.labels import LABEL_MANAGED, MANAGED_VALUE

GPU_FREE_EXIT_BUSY = 3
"""Exit status when the GPU was still held at the timeout."""

_SOURCE = r"""
import json, subprocess, sys, time

MANAGED = "@MANAGED@"


def out(argv):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
    return p.stdout, ""


def holders():
    apps, err = out(["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"])
    if apps is None:
        return None, err
    running, _ = out(["docker", "ps", "-q", "--no-trunc", "--filter", "label=" + MANAGED])
    keep = [c for c in (running or "").split() if c]
    busy = []
    for line in apps.splitlines():
        pid, _, name = line.partition(",")
        pid = pid.strip()
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                cgroup = f.read()
        except OSError:
            cgroup = ""
        if not any(c in cgroup for c in keep):
            busy.append({"pid": int(pid), "name": name.strip()})
    return busy, ""


def main():
    timeout = float(sys.argv[2])
    t0 = time.monotonic()
    while True:
        busy, err = holders()
        waited = round(time.monotonic() - t0, 3)
        if busy is None:
            print(json.dumps({"gpu": "absent", "waited_s": waited, "why": err}))
            return 0
        if not busy:
            print(json.dumps({"gpu": "free", "waited_s": waited}))
            return 0
        if waited >= timeout:
            print(json.dumps({"gpu": "busy", "waited_s": waited, "busy": busy}))
            return @BUSY@
        time.sleep(1)


sys.exit(main())
"""

GPU_FREE_SCRIPT = (
    _SOURCE.replace("@MANAGED@", f"{LABEL_MANAGED}={MANAGED_VALUE}").replace("@BUSY@", str(GPU_FREE_EXIT_BUSY)).strip()
)
