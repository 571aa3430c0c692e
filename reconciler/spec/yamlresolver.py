"""A YAML 1.2 resolver that builds its rule table once per process instead of per scalar and per file.

ruamel's `VersionedResolver` asks which YAML version it resolves for on every scalar (a property that
tries the scanner, absent under the C parser, so an AttributeError is raised and caught each time),
and a new resolver, hence a new rule table, is made for every file loaded. Loading the 2,000 files of
`bench/check_scale.py` spent about a third of its time there. Under the C parser the answer never
changes: the C loader has no scanner to report a `%YAML` directive, so ruamel always falls back to its
default version, and the table for it is the same for every file. This resolver builds that table once
with ruamel's own code (the same implicit resolvers in the same order) and shares it, so every file
loads to the same values.

ruamel's `resolve` extends the list it looks up by first character with the rules listed under `None`
in place; sharing the table is safe only while the table has no `None` entry (1.2's has none), which
is checked when it is built.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ruamel.yaml.resolver import VersionedResolver

_BASE_RULES = VersionedResolver.versioned_resolver


class FixedVersionResolver(VersionedResolver):
    """ruamel's resolver with the rule table of the default version built once and shared."""

    _shared: ClassVar[dict[Any, Any]] = {}

    @property
    def versioned_resolver(self) -> Any:
        version = self._loader_version
        rules = self._shared.get(version)
        if rules is None:
            assert isinstance(_BASE_RULES, property)
            assert _BASE_RULES.fget is not None
            rules = _BASE_RULES.fget(self)
            if None in rules:  # see the module's docstring: ruamel would then grow the shared lists
                return rules
            self._shared[version] = rules
        return rules
