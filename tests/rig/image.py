"""The engine stand-in image, built without network from the machine's own Python.

A real engine image is gigabytes; the rig only needs an image whose command
can run `python3 -m reconciler.sim.standin`. The cheapest such image is a
root holding exactly what that command loads: the machine's Debian python3,
the stdlib modules the stand-in imports when it serves every endpoint (found
by running it once and reading `sys.modules`), the shared libraries those
need (`ldd`), and the stand-in's own three modules. That is a few megabytes,
so `podman import` and a push to the rig's registry take about a second.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

HOST_PYTHON = "/usr/bin/python3"
"""Debian's python3: its stdlib sits under /usr/lib/python3.11 where the image's python3 looks."""

IN_IMAGE_SITE = "usr/lib/python3/dist-packages"
"""Where Debian's python3 finds packages (on sys.path by default), so no PYTHONPATH is needed."""

# Run by the host's python3: serve every endpoint once, then list every module file loaded.
_TRACER = r"""
import json, os, sys, threading, time, urllib.request
repo, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, repo)
from reconciler.sim import standin
from reconciler.sim import rendezvous  # the rig's multi-node lanes meet through it before the stand-in runs
import runpy, importlib.util, importlib.machinery, pkgutil  # what `python3 -m` loads
import encodings.utf_8, encodings.latin_1, encodings.ascii, encodings.idna

def client():
    base = "http://127.0.0.1:%d" % port
    for _ in range(200):
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read()
            break
        except Exception:
            time.sleep(0.05)
    for path in ("/v1/models", "/metrics", "/version", "/nope"):
        try:
            urllib.request.urlopen(base + path, timeout=5).read()
        except Exception:
            pass
    body = {"model": "m", "prompt": "hi", "max_tokens": 2, "stream": True,
            "stream_options": {"include_usage": True}}
    for stream in (True, False):
        body["stream"] = stream
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=10).read()
    files = sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())} - {""})
    with open(out, "w") as f:
        json.dump(files, f)
    os._exit(0)

threading.Thread(target=client, daemon=True).start()
os.environ["STANDIN_TG_TPS"] = "1000"
standin.main(["--bind", "127.0.0.1", "--port", str(port), "--served-model-name", "m"])
os._exit(3)
"""

_LDD_RE = re.compile(r"(/\S+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def traced_files(repo: Path, workdir: Path) -> list[str]:
    """Every module file the stand-in loads while serving each endpoint once."""
    out = workdir / "traced.json"
    subprocess.run(
        [HOST_PYTHON, "-c", _TRACER, str(repo), str(_free_port()), str(out)],
        check=True,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=workdir,
    )
    files: list[str] = json.loads(out.read_text())
    return files


def _libraries(binaries: list[str]) -> set[str]:
    libs: set[str] = set()
    for binary in binaries:
        result = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False)
        for line in result.stdout.splitlines():
            libs.update(m for m in _LDD_RE.findall(line) if os.path.exists(m))
    return libs


def _copy(src: str, root: Path, dest_rel: str | None = None) -> None:
    """Copy `src` (following symlinks) to the same path in `root`, keeping its mtime (valid .pyc)."""
    dest = root / (dest_rel if dest_rel is not None else src.lstrip("/"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        shutil.copy2(src, dest)


def build_rootfs(repo: Path, root: Path, workdir: Path) -> None:
    """Lay out the stand-in's root filesystem in `root`."""
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        (root / target).mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    for folder in ("tmp", "etc", "root", "proc", "sys", "dev", "run", "var/tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    python = os.path.realpath(HOST_PYTHON)
    _copy(python, root)
    (root / "usr/bin/python3").symlink_to(os.path.basename(python))
    repo_prefix = str(repo.resolve()) + os.sep
    natives = [python]
    for path in traced_files(repo, workdir):
        if path.startswith(repo_prefix):
            _copy(path, root, f"{IN_IMAGE_SITE}/{path[len(repo_prefix) :]}")
            continue
        real = os.path.realpath(path)
        _copy(path, root, os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)).lstrip("/"))
        if real.endswith(".so"):
            natives.append(real)
        if path.endswith(".py"):
            folder, name = os.path.split(path)
            cached = os.path.join(
                folder, "__pycache__", name[:-3] + f".cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc"
            )
            if os.path.exists(cached):
                _copy(cached, root)
    for lib in _libraries(natives):
        real_dir = os.path.realpath(os.path.dirname(lib))
        _copy(lib, root, os.path.join(real_dir, os.path.basename(lib)).lstrip("/"))
    for etc in ("/etc/ld.so.cache", "/etc/passwd", "/etc/group"):
        if os.path.exists(etc):
            _copy(etc, root)


def write_tar(root: Path, tar_path: Path, extra: dict[str, str]) -> None:
    """Tar `root` (owned by root) plus small extra files: what `podman import` makes an image of."""

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(tar_path, "w") as tar:
        for child in sorted(root.iterdir()):
            tar.add(child, arcname=child.name, filter=as_root)
        for name, text in extra.items():
            data = text.encode()
            info = as_root(tarfile.TarInfo(name))
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
