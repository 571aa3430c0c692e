"""A package's names imported from their modules on first use (PEP 562), not with the package.

A package that re-exports its modules' names makes every import of any one of its modules pay for all of
them: `reconciler.sim`'s stand-in must start on the stdlib alone, `lanes check` must not import the upstream
poller's HTTP client nor the journal's sqlite-utils to read a mirror or a kept verdict. Such a package keeps
its names for type checkers under `TYPE_CHECKING` and gives its module this `__getattr__`. Stdlib only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def names_from(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name of `homes` (name -> module) when asked."""

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home), name)

    return attribute
