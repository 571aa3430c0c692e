"""The engine stand-in image, built without network from the machine's own Python.

A real engine image is gigabytes; the rig only needs an image whose command
can run `python3 -m reconciler.sim.standin`. The cheapest such image is a
root holding exactly what that command loads: the machine's Debian python3,
the stdlib modules the stand-in imports when it serves every endpoint (found
by running it once and reading `sys.modules`), the shared libraries those
need (`ldd`), and the stand-in's own three modules. That is a few megabytes,
so `podman import` and a push to the rig's registry take about a second.

An engine image (`with_parser`) also carries the engine's own parser, as a
vLLM image does: `vllm/entrypoints/cli/{main,serve}.py` and a `vllm`
command (`reconciler/sim/standin_vllm.py`), which judge a command line with
the flag table the image's STANDIN_PARSER names, exactly as the simulator's
images do (`reconciler/sim/engineargs.py`). That judgement is lanes' own
flag-table code, so the image holds it and what it imports (lanes' packages
and their dependencies from the venv, found by tracing a parse) and the
tables; lanes' preflight then runs the image's parser over real ssh and
podman, and a refused rank exits on it as vLLM's would.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

HOST_PYTHON = "/usr/bin/python3"
"""Debian's python3: its stdlib sits under /usr/lib/python3.11 where the image's python3 looks."""

HOST_SHELL = "/bin/sh"
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

sites = sys.argv[4:]
if sites:  # an engine image: its parser too (every module a refusal and an acceptance load)
    sys.path.extend(sites)
    from reconciler.sim import standin_vllm, engineargs
    from reconciler.engines import flags
    flags.tables()
    assert engineargs.parser_refusal("vllm", ["/m", "--enable-prefix-cachng"], "0.0.1", "vllm-0.33.0") is not None
    assert engineargs.engine_refusal(["vllm", "serve", "/m", "--enable-prefix-caching"], "0.0.1", "vllm-0.33.0") is None

threading.Thread(target=client, daemon=True).start()
os.environ["STANDIN_TG_TPS"] = "1000"
standin.main(["--bind", "127.0.0.1", "--port", str(port), "--served-model-name", "m"])
os._exit(3)
"""

_LDD_RE = re.compile(r"(/\S+)")

VLLM_MODULES = {
    "vllm/__init__.py": "",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/main.py": "from reconciler.sim.standin_vllm import main\n",
    "vllm/entrypoints/cli/serve.py": "from reconciler.sim.standin_vllm import ServeSubcommand\n",
}
"""Where lanes' preflight and a vLLM image's `vllm` command find vLLM's CLI (see `reconciler/sim/standin_vllm.py`)."""
VLLM_COMMAND = "#!/usr/bin/python3\nfrom vllm.entrypoints.cli.main import main\nmain()\n"
TABLES = "reconciler/engines/flagtables"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def traced_files(repo: Path, workdir: Path, sites: Sequence[str] = ()) -> list[str]:
    """Every module file the stand-in loads while serving each endpoint once (with `sites`, lanes'
    dependencies' folders: also while its engine parser refuses and takes a command line)."""
    out = workdir / "traced.json"
    subprocess.run(
        [HOST_PYTHON, "-c", _TRACER, str(repo), str(_free_port()), str(out), *sites],
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


def _cached(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, "__pycache__", name[:-3] + f".cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc")


def lanes_sites() -> list[str]:
    """The folders lanes' dependencies are installed in (the venv running the tests)."""
    return [p for p in site.getsitepackages() if os.path.isdir(p)]


def build_rootfs(repo: Path, root: Path, workdir: Path, *, with_parser: bool = False) -> None:
    """Lay out the stand-in's root filesystem in `root` (`with_parser`: an engine image, see the module)."""
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        (root / target).mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    for folder in ("tmp", "etc", "root", "proc", "sys", "dev", "run", "var/tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    python = os.path.realpath(HOST_PYTHON)
    _copy(python, root)
    (root / "usr/bin/python3").symlink_to(os.path.basename(python))
    sites = lanes_sites() if with_parser else []
    natives = [python]
    if with_parser:  # an engine image has a shell, as lanes' launcher check (`facts/imagecheck.py`) expects
        shell = os.path.realpath(HOST_SHELL)
        _copy(shell, root)
        (root / "usr/bin/sh").symlink_to(os.path.basename(shell))
        natives.append(shell)
    # Lanes' own modules and its dependencies land where the image's python3 looks, with their bytecode
    # (an engine image imports pydantic at every parse: compiling it each time would cost seconds).
    repo_prefix = str(repo.resolve()) + os.sep
    # The longest folder holding a file names where it goes: a venv inside the repo (/work/main/.venv, as
    # in CI) holds the dependencies, which must land in the image's site, not under `.venv/` there.
    prefixes = sorted({repo_prefix, *(p + os.sep for s in sites for p in (s, os.path.realpath(s)))}, key=len)[::-1]
    for path in traced_files(repo, workdir, sites):
        real = os.path.realpath(path)
        prefix = next((p for p in prefixes if path.startswith(p) or real.startswith(p)), None)
        if prefix is not None:
            rel = (path if path.startswith(prefix) else real)[len(prefix) :]
            _copy(path, root, f"{IN_IMAGE_SITE}/{rel}")
            if path.endswith(".py") and prefix != repo_prefix and os.path.exists(_cached(path)):
                _copy(_cached(path), root, f"{IN_IMAGE_SITE}/{os.path.relpath(_cached(path), prefix)}")
            if real.endswith(".so"):
                natives.append(real)
            continue
        _copy(path, root, os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)).lstrip("/"))
        if real.endswith(".so"):
            natives.append(real)
        if path.endswith(".py") and os.path.exists(_cached(path)):
            _copy(_cached(path), root)
    for lib in _libraries(natives):
        real_dir = os.path.realpath(os.path.dirname(lib))
        _copy(lib, root, os.path.join(real_dir, os.path.basename(lib)).lstrip("/"))
    for etc in ("/etc/ld.so.cache", "/etc/passwd", "/etc/group"):
        if os.path.exists(etc):
            _copy(etc, root)
    if with_parser:
        for table in sorted((repo / TABLES).glob("*.json")):  # read as package data, never imported
            _copy(str(table), root, f"{IN_IMAGE_SITE}/{TABLES}/{table.name}")
        for rel, text in VLLM_MODULES.items():
            (root / IN_IMAGE_SITE / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / IN_IMAGE_SITE / rel).write_text(text)
        command = root / "usr/bin/vllm"
        command.write_text(VLLM_COMMAND)
        command.chmod(0o755)


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
