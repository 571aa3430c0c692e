"""The shared YAML 1.2 rule table: the same values as ruamel's own safe loader, the table built once."""

from __future__ import annotations

import io

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.resolver import VersionedResolver

from reconciler.spec.yamlsrc import parse_yaml

pytestmark = pytest.mark.timeout(60)

TRICKY = """\
plain: yes
off_word: off
octal_looking: 0777
octal: 0o17
hex: 0x1F
float: 1.5e3
sexagesimal: 1:30
null_word: ~
empty:
bool: true
BOOL: FALSE
date: 2026-12-02
inf: .inf
merged:
  <<: {a: 1}
  b: 2
list: [-1, +2, .5, "0777"]
"""


def test_values_are_ruamel_s_own() -> None:
    ours = parse_yaml("state/x.yaml", TRICKY.encode()).value
    theirs = YAML(typ="safe", pure=False).load(io.StringIO(TRICKY))
    assert ours == theirs
    assert (ours["plain"], ours["off_word"], ours["sexagesimal"]) == ("yes", "off", "1:30")  # YAML 1.2, not 1.1


def test_the_rule_table_is_built_once_for_many_files(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_yaml("state/warm.yaml", b"a: 1\n")
    built: list[object] = []
    original = VersionedResolver.add_version_implicit_resolver

    def counting(self: VersionedResolver, *args: object) -> None:
        built.append(args)
        original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(VersionedResolver, "add_version_implicit_resolver", counting)
    for i in range(5):
        assert parse_yaml(f"state/f{i}.yaml", f"n: {i}\nflag: true\n".encode()).value == {"n": i, "flag": True}
    assert built == []
