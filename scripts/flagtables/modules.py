"""Scopes and the wheel's modules, as the interpreter sees them.

A module is parsed once; a top-level name is evaluated the first time
something needs it, by running exactly the top-level statements that bind
it (the first branch of an `if`/`try` that does, so `if TYPE_CHECKING:` and
`try: import x` bind, and `except ImportError: x = None` only when nothing
else does) and those that extend it in place (`X.append(...)`, `X[k] = v`).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from scripts.flagtables import evaluate, statements
from scripts.flagtables.values import EngineError, Indeterminate, Unknown

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp

MUTATORS = frozenset({"append", "extend", "update", "add", "insert", "remove", "setdefault", "discard"})


class Scope:
    def __init__(self, module: Module, parent: Scope | None, vars: dict[str, object] | None = None) -> None:
        self.module = module
        self.parent = parent
        self.vars: dict[str, object] = {} if vars is None else vars
        self.klass: type | None = None  # set on a class body's scope
        self.owner: type | None = None  # the class of the method running in this scope (for super())
        self.first: object = None  # its first argument
        self.forgiving = False
        self.yields: list[object] | None = None

    def lookup(self, name: str) -> object:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.vars:
                return scope.vars[name]
            if scope.klass is not None and name in scope.klass.__dict__["__lanes_lazy__"]:
                return self.module.interp.class_attr(scope.klass, name)
            scope = scope.parent
        try:
            return self.module.lookup(name)
        except LookupError:
            pass
        if name in evaluate.BUILTINS:
            return evaluate.BUILTINS[name]
        return Unknown(name)


class Module:
    """One module of the wheel: parsed once, its names evaluated on demand."""

    def __init__(self, interp: Interp, name: str, path: str, tree: ast.Module, is_package: bool) -> None:
        self.interp = interp
        self.name = name
        self.path = path
        self.is_package = is_package
        self.tree = tree
        self.values: dict[str, object] = {}
        self.scope = Scope(self, None, self.values)
        self._busy: set[str] = set()
        self._stars: list[str] = []
        self._index: dict[str, list[ast.stmt]] = {}
        self._collect(tree.body)

    def _collect(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If | ast.Try | ast.With):
                # The first branch binds the name (`if TYPE_CHECKING:`, `try: import x`); the others only
                # when it does not (`except ImportError: x = None` must not win over the import).
                first = set(self._names(stmt.body))
                self._collect(stmt.body)
                rest: list[ast.stmt] = []
                if isinstance(stmt, ast.If):
                    rest = stmt.orelse
                elif isinstance(stmt, ast.Try):
                    rest = [s for h in stmt.handlers for s in h.body] + stmt.orelse
                self._collect([s for s in rest if not set(self._names([s])) & first])
                continue
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                self._stars.append(self.interp.resolve_relative(self, stmt.module, stmt.level))
            for name in self._names([stmt]) + self._mutated(stmt):
                self._index.setdefault(name, []).append(stmt)

    @staticmethod
    def _names(stmts: list[ast.stmt]) -> list[str]:
        out: list[str] = []
        for stmt in stmts:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    out += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
            elif isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
                if not isinstance(stmt, ast.AnnAssign) or stmt.value is not None:
                    out.append(stmt.target.id)
            elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                out.append(stmt.name)
            elif isinstance(stmt, ast.Import):
                out += [a.asname or a.name.split(".")[0] for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                out += [a.asname or a.name for a in stmt.names if a.name != "*"]
        return out

    @staticmethod
    def _mutated(stmt: ast.stmt) -> list[str]:
        """`X.append(...)`, `X[k] = v`, `X[k] += v` at top level extend a name defined above."""
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and func.attr in MUTATORS and isinstance(func.value, ast.Name):
                return [func.value.id]
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
        return [t.value.id for t in targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)]

    def lookup(self, name: str) -> object:
        if name in self.values:
            return self.values[name]
        if name in self._busy:
            return Unknown(f"{self.name}.{name} (defined in terms of itself)")
        bindings = self._index.get(name)
        if not bindings:
            return self._elsewhere(name)
        self._busy.add(name)
        try:
            for stmt in bindings:
                try:
                    statements.exec_stmt(self.interp, stmt, self.scope)
                except (Indeterminate, EngineError) as exc:
                    self.interp.note(f"{self.path}:{stmt.lineno}: {name} not evaluated ({exc})")
        finally:
            self._busy.discard(name)
        return self.values.setdefault(name, Unknown(f"{self.name}.{name}"))

    def _elsewhere(self, name: str) -> object:
        if self.is_package:
            sub = self.interp.module(f"{self.name}.{name}")
            if sub is not None:
                return sub
        for star in self._stars:
            found = self.interp.import_from(star, name)
            if not isinstance(found, Unknown):
                return found
        raise LookupError(name)

    def __deepcopy__(self, memo: dict[int, object]) -> Module:
        return self
