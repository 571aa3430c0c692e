"""The one-off container that checks an image holds what a lane launches (`engines/launcher.py` says what).

`docker run --rm --network none --entrypoint sh IMAGE -c SCRIPT lanes-launcher-check NAME...`: a plain
name must be an executable on the image's PATH (`command -v`), `py:MODULE` a module its python3 can find
(`importlib.util.find_spec`, which does not import it). It prints `missing: NAME...` and exits 3 when
something is not there.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.facts.docker import DOCKER

LAUNCHER_MARKER = "lanes-launcher-check"
LAUNCHER_MISSING_EXIT = 3
LAUNCHER_SCRIPT = (
    'missing=""; for x in "$@"; do case "$x" in '
    'py:*) python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)" '
    '"${x#py:}" >/dev/null 2>&1 || missing="$missing $x";; '
    '*) command -v "$x" >/dev/null 2>&1 || missing="$missing $x";; esac; done; '
    f'[ -z "$missing" ] || {{ echo "missing:$missing"; exit {LAUNCHER_MISSING_EXIT}; }}'
)
"""A constant: the names arrive as positional parameters, never as text of the script."""


def launcher_check_argv(image: str, needs: Sequence[str]) -> list[str]:
    return [DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c", LAUNCHER_SCRIPT,
            LAUNCHER_MARKER, *needs]  # fmt: skip


def missing_from(stdout: str) -> list[str]:
    for line in stdout.splitlines():
        if line.startswith("missing:"):
            return line.removeprefix("missing:").split()
    return []
