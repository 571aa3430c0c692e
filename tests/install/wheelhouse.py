"""An offline wheelhouse for the install tests: no test may reach an index on the network.

lanes' dependencies are repacked as wheels from the distributions installed in the environment running
the tests (their RECORD lists every file), so `scripts/install --wheelhouse` resolves them with pip exactly
as it would from wheels downloaded on a connected machine. The build backend (setuptools 70.1 or newer,
which builds wheels without the `wheel` package) is the one installed here when it is new enough, else a
local wheel that pip's own configuration points to (a find-links folder or a file:// index), else the
tests that build are skipped with the reason.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import tomllib
import urllib.parse
import urllib.request
import zipfile
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

SETUPTOOLS_MIN = Version("70.1")
"""setuptools 70.1 took bdist_wheel in (its changelog, v70.1.0); older ones need the `wheel` package too."""

SKIPPED_METADATA = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}
"""What pip writes at install time, not part of a wheel."""


def requirement_closure(pyproject: Path, extras: tuple[str, ...] = ()) -> list[Distribution]:
    """The installed distributions a project's dependencies need, with its `extras`, transitively (the
    dependencies' own extras off).

    The roots come from pyproject.toml, not from the project's installed metadata, which an editable
    install leaves as it was when it was made."""
    seen: dict[str, Distribution] = {}
    project = tomllib.loads(pyproject.read_text())["project"]
    todo = list(project["dependencies"])
    for extra in extras:
        todo.extend(project["optional-dependencies"][extra])
    name = pyproject.parent.name
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            raise AssertionError(f"{name} needs {req.name}, which is not installed here") from None
        seen[key] = dist
        todo.extend(dist.requires or [])
    return list(seen.values())


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def repack(dist: Distribution, out: Path) -> Path:
    """A wheel of an installed distribution: its files under site-packages, a fresh RECORD."""
    files = [f for f in dist.files or [] if not str(f).startswith("..") and "__pycache__" not in f.parts]
    info_dir = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    wheel_meta = (dist.read_text("WHEEL") or "").splitlines()
    tags = [line.split(":", 1)[1].strip().split("-") for line in wheel_meta if line.startswith("Tag:")]
    # The file name's compressed tag set (py2.py3-none-any): each part's values in order, joined by dots.
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    target = out / f"{name}-{dist.version}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in files:
            if file.parts[0] == info_dir and file.name in SKIPPED_METADATA:
                continue
            path = Path(str(file.locate()))
            if not path.is_file():
                continue
            data = path.read_bytes()
            wheel.writestr(str(file), data)
            record.append(_record_line(str(file), data))
        record.append(f"{info_dir}/RECORD,,")
        wheel.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return target


def _pip_sources() -> list[str]:
    """find-links and index URLs from pip's configuration (files and environment), as pip reports them."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
    ).stdout
    sources: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.split(".")[-1] in {"find-links", "index-url", "extra-index-url"}:
            sources.extend(value.strip().strip("'\"").split())
    return sources


def local_setuptools(out: Path) -> Path | None:
    """A setuptools wheel new enough to build lanes: the one running here, repacked into `out`, or one from a
    local source pip is configured with."""
    try:
        here = distribution("setuptools")
    except PackageNotFoundError:
        here = None
    if here is not None and Version(here.version) >= SETUPTOOLS_MIN:
        return repack(here, out)
    found: list[Path] = []
    for source in _pip_sources():
        if source.startswith("file://"):
            base = Path(urllib.request.url2pathname(urllib.parse.urlparse(source).path))
            page = base / "setuptools" / "index.html"
            if page.is_file():  # a PEP 503 simple index on disk: follow its links
                hrefs = re.findall(r'href="([^"#]+)', page.read_text())
                found.extend((page.parent / urllib.parse.unquote(href)).resolve() for href in hrefs)
            continue
        if "://" not in source and Path(source).is_dir():
            found.extend(Path(source).glob("setuptools-*.whl"))
    usable = [p for p in found if p.is_file() and Version(p.name.split("-")[1]) >= SETUPTOOLS_MIN]
    return max(usable, key=lambda p: Version(p.name.split("-")[1]), default=None)
