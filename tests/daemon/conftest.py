"""Fixtures the daemon's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.smggateway import Gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    """The real SMG on loopback ports (its key in `tmp_path`), killed by its pid after the test."""
    gw = Gateway(tmp_path)
    gw.start()
    try:
        yield gw
    finally:
        gw.kill()
