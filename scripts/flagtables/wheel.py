"""A wheel read as files: its Python modules by dotted name, and its identity (name, sha256)."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModuleSource:
    name: str
    path: str
    """Path inside the wheel, e.g. sglang/srt/server_args.py."""
    text: str
    is_package: bool


class Wheel:
    """The `.py` files of a wheel (a zip), never imported: only read."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        data = self.path.read_bytes()
        self.sha256 = hashlib.sha256(data).hexdigest()
        self._zip = zipfile.ZipFile(self.path)
        self._files = {name for name in self._zip.namelist() if name.endswith(".py")}
        self.read: list[str] = []
        """Paths of the files the reader opened, in order: what a table was derived from."""

    @property
    def filename(self) -> str:
        return self.path.name

    def module(self, name: str) -> ModuleSource | None:
        base = name.replace(".", "/")
        for path, package in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
            if path in self._files:
                if path not in self.read:
                    self.read.append(path)
                text = self._zip.read(path).decode("utf-8")
                return ModuleSource(name=name, path=path, text=text, is_package=package)
        return None
