"""What every test shares.

Typer builds an app's whole click command tree on every `CliRunner.invoke` (it evaluates each command's
string annotations: about 0.2 s for lanes' tree, more than a `lanes check` of the example fleet costs), while
the `lanes` program builds it once per process. The tree is a pure function of the app, so the tests build it
once per app too: the hostile-input property tests alone invoke the CLI hundreds of times.

The property tests' example counts come from a hypothesis profile (`tests.support.properties`), loaded here,
before any test module's `@settings` is evaluated.
"""

from __future__ import annotations

import typer.testing
from typer._click import Command
from typer.main import Typer
from typer.main import get_command as _build

from tests.support import properties

_built: dict[int, tuple[Typer, Command]] = {}


def _command(typer_instance: Typer) -> Command:
    known = _built.get(id(typer_instance))
    if known is None or known[0] is not typer_instance:
        known = _built[id(typer_instance)] = (typer_instance, _build(typer_instance))
    return known[1]


typer.testing._get_command = _command  # type: ignore[attr-defined]  # typer's test runner's one builder of the tree
_profile = properties.load()


def pytest_report_header() -> str:
    return f"lanes hypothesis profile: {_profile} ({properties.PROFILE_ENV})"


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    """This worker's fork server (`tests.support.forkserver`) ends with it."""
    from tests.support import forkserver

    forkserver.stop_server()
