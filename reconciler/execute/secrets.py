"""Secret values by name, from files on the control node (systemd credentials).

Lanes reference secrets by name only; the value is read here at apply time
and travels to a host on stdin into a 0600 env file, never on a command line
and never into logs, the journal or git.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from reconciler.errors import PermanentError

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SecretStore:
    def __init__(self, directory: str | Path | None) -> None:
        env_dir = os.environ.get("CREDENTIALS_DIRECTORY")
        self.directory = Path(directory) if directory else (Path(env_dir) if env_dir else None)

    def get(self, name: str) -> str:
        if not _NAME.match(name):
            raise PermanentError(f"secret name '{name}' is not a plain name")
        if self.directory is None:
            raise PermanentError(f"secret '{name}' is needed but no secrets directory is configured")
        path = self.directory / name
        try:
            return path.read_text().rstrip("\n")
        except OSError as exc:
            raise PermanentError(f"secret '{name}' cannot be read from {path}: {exc.strerror}") from None

    def values(self) -> list[str]:
        """Every known secret value, for the log redaction processor."""
        if self.directory is None or not self.directory.is_dir():
            return []
        out = []
        for path in self.directory.iterdir():
            try:
                value = path.read_text().strip()
            except OSError:
                continue
            if len(value) >= 6:
                out.append(value)
        return out


def env_file_text(pairs: list[tuple[str, str]]) -> str:
    """docker --env-file format: one KEY=VALUE per line, no quoting, no newlines in values."""
    lines = []
    for key, value in pairs:
        if "\n" in value or "\r" in value:
            raise PermanentError(f"secret for {key} contains a newline, which an env file cannot carry")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"
