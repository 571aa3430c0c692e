"""Running the real probe program in a test: a PATH with python3 alone, and a network namespace of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

UNSHARE = shutil.which("unshare") if os.geteuid() == 0 else None
"""The probe digests this machine's listening sockets: run as root, each probe gets a network namespace of its
own (nothing listens there), so sockets other tests open and close between two probes do not change it."""


def isolated(argv: list[str]) -> list[str]:
    return [UNSHARE, "--net", "--", *argv] if UNSHARE else argv


def run_probe(bin_dir: Path, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        isolated(argv), input=stdin, capture_output=True, text=True, timeout=30, env={"PATH": str(bin_dir)}, check=False
    )
