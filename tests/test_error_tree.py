"""The error tree drawn in `reconciler/errors.py`'s docstring is the real one: every subclass of LanesError
anywhere in lanes, under its real parent, and nothing that is not."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import reconciler
from reconciler import errors

pytestmark = pytest.mark.timeout(60)

NODE = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn() -> dict[str, str]:
    """class -> parent, as the docstring draws them."""
    lines = (errors.__doc__ or "").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "LanesError")
    base = len(lines[start]) - len(lines[start].lstrip())
    parents: dict[str, str] = {}
    path = ["LanesError"]
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        m = NODE.match(line[base:])
        if m is None:
            continue  # a description's second line
        depth = len(m["indent"]) // 4 + 1
        path = [*path[:depth], m["name"]]
        parents[m["name"]] = path[depth - 1]
    return parents


def real() -> dict[str, str]:
    """class -> parent for every subclass of LanesError defined in lanes (every module imported)."""
    for info in pkgutil.walk_packages(reconciler.__path__, "reconciler."):
        if not info.name.startswith("reconciler.sim"):  # stand-ins for hosts: lanes' errors are not theirs
            importlib.import_module(info.name)
    out: dict[str, str] = {}
    todo: list[type[errors.LanesError]] = [errors.LanesError]
    while todo:
        cls = todo.pop()
        sub: type[errors.LanesError]
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("reconciler."):
                out[sub.__name__] = cls.__name__
                todo.append(sub)
    return out


def test_every_lanes_error_is_drawn_under_its_parent() -> None:
    assert drawn() == real()


def test_the_drawing_is_read_as_drawn() -> None:
    tree = drawn()
    assert tree["HostFaultError"] == "TransientError" and tree["StagingError"] == "StepFailedError"
    assert tree["ConfigError"] == "InputError" and tree["TransientError"] == "LanesError"
