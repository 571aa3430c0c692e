"""Fixtures of the fact tests that run the real host programs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """PATH for the probe: python3 only (no docker, no nvidia-smi: those are errors it reports)."""
    path = tmp_path / "bin"
    path.mkdir()
    (path / "python3").symlink_to(os.path.realpath(sys.executable))
    return path
