"""The safe YAML loader of `yamlsrc`, made once per thread, and plain documents built from its nodes directly.

Loading the 2,000 files of a 1,000-lane state (bench/check_scale.py) cost about 0.4 s of CPU, most of it
in ruamel's Python half, not its C parser: `YAML.load` makes a new loader class and resolver for every
file, and its constructor takes six calls and a generator per node, turning every node's tag into its
string twice on the way. Here the loader class (ruamel's C parser, safe constructor and our resolver, the
class `YAML.load` builds for `typ="safe"` with the C parser) is made once, and a document made of
mappings, sequences and the YAML 1.2 core scalars (str, int, float, bool, null) is built by one
recursive function that calls ruamel's own constructor for each non-string scalar, so every value is
what ruamel makes of it. Anything else is handed to ruamel's constructor as it stands, untouched:
another tag, a merge key, a node used twice (an alias: ruamel shares the object, and expanding it here
would be the billion-laughs blow-up), a key that is not a scalar, a duplicate key (ruamel's error says
which), or any exception on the way (ruamel's says it in its order). A short plain scalar's tag is resolved
once per process (keys and values recur in every file) instead of by the rule table at every node.
"""

from __future__ import annotations

import io
import threading
from typing import Any

import ruamel.yaml.main
import ruamel.yaml.resolver
from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode

from reconciler.spec.yamlresolver import FixedVersionResolver

CParser: Any = getattr(ruamel.yaml.main, "CParser", None)
"""The C parser `YAML(typ="safe")` uses (None without ruamel's C extension: then its pure loader)."""

_DEFAULT_YAML_VERSION: Any = getattr(ruamel.yaml.resolver, "_DEFAULT_YAML_VERSION", (1, 2))
"""What ruamel resolves and constructs for when nothing says otherwise ((1, 2) in ruamel 0.19)."""

_CORE = "tag:yaml.org,2002:"
_STR, _MAP, _SEQ = _CORE + "str", _CORE + "map", _CORE + "seq"
_SCALARS = frozenset(_CORE + kind for kind in ("int", "float", "bool", "null"))


class _Slow(Exception):  # noqa: N818 - a signal, not an error: ruamel's constructor takes the document
    pass


class _Constructor(SafeConstructor):
    def construct_document(self, node: Any) -> Any:
        try:
            return self._plain(node, set())
        except Exception:  # ruamel builds it (and raises its own error, if there is one)
            return SafeConstructor.construct_document(self, node)

    def _plain(self, node: Any, seen: set[int]) -> Any:
        tag = node.tag
        if type(node) is ScalarNode:
            if tag == _STR:
                return node.value
            if tag in _SCALARS:
                return self.yaml_constructors[tag](self, node)
            raise _Slow
        if id(node) in seen:
            raise _Slow
        seen.add(id(node))
        if type(node) is SequenceNode and tag == _SEQ:
            return [self._plain(child, seen) for child in node.value]
        if type(node) is MappingNode and tag == _MAP and getattr(node, "merge", None) is None:
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if type(key_node) is not ScalarNode:
                    raise _Slow
                key = self._plain(key_node, seen)
                if key in out:
                    raise _Slow
                out[key] = self._plain(value_node, seen)
            return out
        raise _Slow


_TAGS: dict[str, Any] = {}
"""The tag of each short plain scalar seen, under the one rule table of `FixedVersionResolver`."""
_TAGS_MAX = 16384
"""A 1,000-lane state holds about 4,100 distinct short plain scalars; at most about 2 MB of them are kept."""
_TAG_CHARS = 64


def _loader_class() -> type[Any]:
    assert CParser is not None

    class Loader(CParser, _Constructor, FixedVersionResolver):  # type: ignore[misc]
        # What ruamel's YAML.load sets up for typ="safe" with the C parser (main.py get_constructor_parser).
        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            self._parser = self._composer = self
            _Constructor.__init__(self, loader=self)
            self.allow_duplicate_keys = False
            FixedVersionResolver.__init__(self, version=None, loadumper=self)

        @property
        def processing_version(self) -> Any:
            # ruamel's property asks the scanner and the serializer first, which this loader has neither of:
            # two AttributeErrors raised and caught for every int and float constructed, to come here.
            version = self._loader_version
            return _DEFAULT_YAML_VERSION if version is None else version

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            # A plain scalar's tag follows from its text alone (the rule table never changes under the C
            # parser, and there are no path resolvers): the same keys and values recur in every file. The
            # tag object is shared, as ruamel shares its default tags.
            if kind is not ScalarNode or not implicit[0] or self.yaml_path_resolvers or len(value) > _TAG_CHARS:
                return FixedVersionResolver.resolve(self, kind, value, implicit)
            tag = _TAGS.get(value)
            if tag is None:
                tag = FixedVersionResolver.resolve(self, kind, value, implicit)
                if len(_TAGS) >= _TAGS_MAX:
                    _TAGS.clear()
                _TAGS[value] = tag
            return tag

    return Loader


_LOADER: type[Any] | None = _loader_class() if CParser is not None else None
_PURE = threading.local()
"""Without the C extension: one pure safe `YAML()` per thread (making one globs ruamel's plug-in folder)."""


def load_safe(text: str) -> Any:
    """The document `YAML(typ="safe").load(text)` gives, with its errors."""
    if _LOADER is None:
        pure: YAML | None = getattr(_PURE, "yaml", None)
        if pure is None:
            pure = _PURE.yaml = YAML(typ="safe", pure=True)
        return pure.load(io.StringIO(text))
    loader = _LOADER(io.StringIO(text))
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
