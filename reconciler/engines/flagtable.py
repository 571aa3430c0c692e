"""Flag tables: what one engine release's parser accepts, read from the JSON the package ships.

`reconciler/engines/flagtables/<engine>-<version>.json` are written by
`scripts/flag_tables.py` from the engines' published wheels; each names the
wheel and its sha256 and the builds it was made for. `engines.flags` judges
command lines with them.

Which table judges a lane's `engine_version` (`table_for`):

1. the table read from that build's own source (`read_from: build`, the
   script's `--wheel VERSION=PATH`): `how="build"`;
2. else the table of that very release (the build is the release):
   `how="release"`;
3. else the release's table the script chose for the build and lists it
   among the builds it stands for (`read_from: release`): `how="chosen"`;
4. else the newest table of the same major.minor series at or below the
   build's public version: `how="nearest"`;
5. else none: the lane's flags are not checked (`lanes check` warns).

Only 1 and 2 are exact: they are the parser the build runs. A release's
table judging another build (3, 4) may lack flags the build has (the
production lane's SGLang branch takes `--reasoning-parser deepseek-v41`,
which 0.5.19, the release its build stands for, lacks: releases have it from
0.5.21), so what it refuses is a warning naming that release, never a denial.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

TABLES_PACKAGE = "reconciler.engines.flagtables"
ENGINES_WITH_TABLES = ("sglang", "vllm")
Choice = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Flag:
    flags: tuple[str, ...]
    nargs: int | str | None
    type: str = "str"
    choices: tuple[Choice, ...] | None = None
    required: bool = False
    refused: str | None = None


@dataclass(frozen=True)
class FlagTable:
    engine: str
    version: str
    builds: tuple[str, ...]
    wheel: str
    sha256: str
    prog: str
    usage: str | None
    allow_abbrev: bool
    error_prog: str
    error_usage: str | None
    preprocess: str | None
    positionals: tuple[tuple[str, int | str | None], ...]
    flags: tuple[Flag, ...]
    add_help: bool = True
    """argparse's own -h/--help (both engines keep it): the engine prints its help and exits 0."""
    read_from: Literal["release", "build"] = "release"
    """Read from a published release's wheel, or from the source of the one build it lists."""

    def flag(self, option: str) -> Flag | None:
        return self._by_option.get(option)

    @functools.cached_property
    def _by_option(self) -> dict[str, Flag]:
        # Rendering asks for --kv-cache-dtype's choices at every rank: a scan of 300-500 flags each time.
        out: dict[str, Flag] = {}
        for f in self.flags:
            for option in f.flags:
                out.setdefault(option, f)  # the first flag holding an option string, as the scan found it
        return out

    def choices(self, option: str) -> tuple[Choice, ...] | None:
        """The choices argparse enforces for a flag (None: any value, or no such flag)."""
        found = self.flag(option)
        return found.choices if found is not None and checked_type(found.type) else None


@dataclass(frozen=True)
class TableMatch:
    table: FlagTable
    how: Literal["build", "release", "chosen", "nearest"]

    @property
    def exact(self) -> bool:
        """The parser the build itself runs: what it refuses, the engine refuses."""
        return self.how in ("build", "release")

    @property
    def placed(self) -> bool:
        """A table the script wrote for this very build or release (not a series' nearest guess)."""
        return self.how != "nearest"


def load_table(doc: dict[str, Any]) -> FlagTable:
    """A table from its JSON document."""
    parser = doc["parser"]
    return FlagTable(
        engine=doc["engine"],
        version=doc["version"],
        builds=tuple(b["engine_version"] for b in doc.get("builds", [])),
        wheel=doc["source"]["wheel"],
        sha256=doc["source"]["sha256"],
        prog=parser["prog"],
        usage=parser["usage"],
        allow_abbrev=parser["allow_abbrev"],
        error_prog=parser["error_prog"],
        error_usage=parser["error_usage"],
        preprocess=parser["preprocess"],
        add_help=parser.get("add_help", True),
        # A table that does not say was read from a release: it never judges another build as exact.
        read_from="build" if doc.get("read_from") == "build" else "release",
        positionals=tuple((p["name"], p["nargs"]) for p in doc.get("positionals", [])),
        flags=tuple(
            Flag(
                flags=tuple(f["flags"]),
                nargs=f["nargs"],
                type=f.get("type", "str"),
                choices=tuple(f["choices"]) if "choices" in f else None,
                required=f.get("required", False),
                refused=f.get("refused"),
            )
            for f in doc["flags"]
        ),
    )


@functools.cache
def tables() -> tuple[FlagTable, ...]:
    """Every table shipped in the package (read once per process)."""
    found = [
        load_table(json.loads(entry.read_text(encoding="utf-8")))
        for entry in resources.files(TABLES_PACKAGE).iterdir()
        if entry.name.endswith(".json")
    ]
    return tuple(sorted(found, key=lambda t: (t.engine, Version(t.version))))


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


_MATCHES: list[tuple[tuple[FlagTable, ...], dict[tuple[str, str], TableMatch | None]]] = [((), {})]
"""The shipped tables the answers below were given for, and the answers: rendering and the flag rule ask
for every rank of every lane (2,600 parses of versions for 1,000 lanes); a different `tables()` (a test's)
starts afresh."""
_MATCHES_MAX = 4096


def table_for(engine: str, engine_version: str, available: Sequence[FlagTable] | None = None) -> TableMatch | None:
    """The table that judges a lane's flags, by the rule in the module's docstring."""
    if available is not None:
        return _table_for(engine, engine_version, available)
    shipped = tables()
    held, answers = _MATCHES[0]
    if held is not shipped or len(answers) >= _MATCHES_MAX:
        answers = {}
        _MATCHES[0] = (shipped, answers)
    key = (engine, engine_version)
    if key not in answers:
        answers[key] = _table_for(engine, engine_version, shipped)
    return answers[key]


def _table_for(engine: str, engine_version: str, available: Sequence[FlagTable]) -> TableMatch | None:
    candidates = [t for t in available if t.engine == engine]
    listed = [t for t in candidates if engine_version in t.builds]
    for table in listed:
        if table.read_from == "build":
            return TableMatch(table, "build")
    wanted = _version(engine_version)
    for table in candidates:
        if table.read_from == "release" and wanted is not None and _version(table.version) == wanted:
            return TableMatch(table, "release")
    if listed:
        return TableMatch(listed[0], "chosen")
    if wanted is None or not any(wanted.release):
        return None
    public = Version(wanted.public)
    series = [
        t
        for t in candidates
        if t.read_from == "release"
        and Version(t.version).release[:2] == wanted.release[:2]
        and Version(t.version) <= public
    ]
    return TableMatch(max(series, key=lambda t: Version(t.version)), "nearest") if series else None


BASE_TYPES = frozenset({"str", "int", "float", "json"})
"""Value types argparse converts itself (`engines.flags` redoes them); `optional:`/`parsed:` wrap them."""


def checked_type(tag: str) -> bool:
    """Whether a value type is redone by `engines.flags` (else values and choices are taken as they come)."""
    kind, _, inner = tag.partition(":")
    return tag in BASE_TYPES or (kind in ("optional", "parsed") and checked_type(inner))
