"""spec/yamlfast.py: plain documents built from ruamel's nodes directly, the rest by ruamel, the same values.

What is checked: every document below loads to what ruamel's own safe loader gives (values, types, and
an alias's shared object), or raises ruamel's own error; a document of maps, lists and core scalars is
built without ruamel's constructor, and anything else still goes through it.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import YAMLError
from ruamel.yaml.resolver import VersionedResolver

from reconciler.spec import yamlfast
from reconciler.spec.yamlfast import load_safe

pytestmark = pytest.mark.timeout(60)

PLAIN = """\
desired: running
engine: vllm
engine_version: 0.32.0
tp: 4
util: 0.85
big: 1_000
hex: 0x1F
octal: 0o17
neg: -3
inf: .inf
flag: true
FLAG: FALSE
nothing: ~
empty:
quoted: "0777"
single: '12'
hosts: [s0001, s0002]
env:
  A: "1"
  nested: {x: [1, 2.5, null, false, {y: z}]}
12: an int key
1.5: a float key
true: a bool key
null: a null key
long_number: 1111111111111111111111111111111111111111111111111111111111111111111111111111111111111111
long_words: a plain scalar longer than the tags kept for short ones, which is resolved every time it is seen
"""

ELSEWHERE = {
    "merge": "base: &b {a: 1, b: 2}\nmerged:\n  <<: *b\n  b: 3\n",
    "alias": "one: &x [1, 2]\ntwo: *x\n",
    "scalar alias": "one: &x hello\ntwo: *x\n",
    "timestamp": "when: 2026-12-02\n",
    "tag": "blob: !!binary aGVsbG8=\n",
    "set": "s: !!set {a, b}\n",
    "str tag on a number": "n: !!str 12\n",
    "omap": "o: !!omap [{a: 1}, {b: 2}]\n",
    "complex key": "? [a, b]\n: value\n",
    "recursive": "a: &a [*a]\n",
    "list at the top": "- 1\n- [2, 3]\n",
    "a scalar document": "just words\n",
    "empty document": "",
}

ERRORS = {
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "duplicate nested key": "outer:\n  x: 1\n  x: 2\n",
    "unknown tag": "x: !nope 1\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "two documents": "a: 1\n---\nb: 2\n",
}


def _ruamel(text: str) -> Any:
    return YAML(typ="safe", pure=False).load(io.StringIO(text))


@pytest.mark.parametrize("text", [PLAIN, *ELSEWHERE.values()], ids=["plain", *ELSEWHERE])
def test_every_document_loads_to_ruamels_own_values(text: str) -> None:
    ours, theirs = load_safe(text), _ruamel(text)
    if text.startswith("a: &a"):  # a list holding itself: compare its shape
        assert ours["a"][0] is ours["a"] and theirs["a"][0] is theirs["a"]
        return
    assert ours == theirs
    assert repr(ours) == repr(theirs)  # the same types: 1 is not 1.0 or True


def test_an_alias_is_the_same_object_as_in_ruamel() -> None:
    loaded = load_safe(ELSEWHERE["alias"])
    assert loaded["one"] is loaded["two"]


@pytest.mark.parametrize("text", list(ERRORS.values()), ids=list(ERRORS))
def test_a_bad_document_raises_ruamels_own_error(text: str) -> None:
    with pytest.raises(YAMLError) as ours:
        load_safe(text)
    with pytest.raises(YAMLError) as theirs:
        _ruamel(text)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_a_plain_document_is_built_without_ruamels_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> Any:
        raise AssertionError("ruamel's constructor was used")

    monkeypatch.setattr(SafeConstructor, "construct_object", refused)
    assert load_safe(PLAIN)["env"]["nested"] == {"x": [1, 2.5, None, False, {"y": "z"}]}
    with pytest.raises(AssertionError, match="constructor was used"):
        load_safe(ELSEWHERE["merge"])
    with pytest.raises(AssertionError, match="constructor was used"):
        load_safe(ELSEWHERE["alias"])  # a node used twice: never expanded here


def test_a_short_plain_scalars_tag_is_resolved_once(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = _ruamel(PLAIN)
    load_safe(PLAIN)
    asked: list[str] = []
    real = VersionedResolver.resolve

    def counting(self: VersionedResolver, kind: Any, value: Any, implicit: Any) -> Any:
        asked.append(value)
        return real(self, kind, value, implicit)

    monkeypatch.setattr(VersionedResolver, "resolve", counting)
    assert load_safe(PLAIN) == theirs
    # Only what is not a short plain scalar is resolved again: the mappings, the lists, the quoted
    # scalars and the long ones (ruamel resolves every node of a document each time).
    assert "tp" not in asked and "0.85" not in asked and "running" not in asked
    assert [v for v in asked if isinstance(v, str)] == [
        "0777",
        "12",
        "1",
        PLAIN.split("long_number: ")[1].split(maxsplit=1)[0],
        PLAIN.split("long_words: ")[1].strip(),
    ]


def test_the_loader_reads_ints_and_floats_for_the_yaml_version_ruamel_would() -> None:
    loader = yamlfast._LOADER(io.StringIO("a: 1\n")) if yamlfast._LOADER is not None else None
    if loader is None:
        pytest.skip("no C extension: ruamel's pure loader is used as it is")
    try:
        theirs = vars(VersionedResolver)["processing_version"]  # ruamel's own property, as a descriptor
        assert isinstance(theirs, property) and theirs.fget is not None
        assert loader.processing_version == theirs.fget(loader) == (1, 2)
    finally:
        loader.dispose()
