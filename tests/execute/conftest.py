"""`world`: simulated Sparks for the example fleet, the reconciler in this process, and its store."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.world import World, sim_world

_counter = itertools.count(1)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    n = next(_counter)
    async with sim_world(tmp_path, base_address=f"127.{60 + (os.getpid() % 40)}.{n % 250}.") as w:
        yield w
