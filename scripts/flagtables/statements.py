"""Statements of the engine's source: assignment, control flow, imports, definitions.

See `evaluate` for expressions and for how an Unknown branch is handled.
"""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING

from scripts.flagtables import classes, evaluate
from scripts.flagtables.values import (
    BreakFlow,
    ContinueFlow,
    EngineError,
    Func,
    Indeterminate,
    ReturnFlow,
    Unknown,
    contains_unknown,
    truth,
)

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp
    from scripts.flagtables.modules import Scope

MAX_STEPS = 3_000_000


def bind_params(interp: Interp, func: Func, args: list[object], kwargs: dict[str, object], scope: Scope) -> None:
    spec = func.node.args
    positional = [*spec.posonlyargs, *spec.args]
    first_default = len(positional) - len(func.defaults)
    for index, param in enumerate(positional):
        if index < len(args):
            value = args[index]
        elif param.arg in kwargs:
            value = kwargs.pop(param.arg)
        elif index >= first_default:
            value = func.defaults[index - first_default]
        else:
            value = Unknown(f"argument {param.arg} of {func.name}")
        scope.vars[param.arg] = value
    if spec.vararg is not None:
        scope.vars[spec.vararg.arg] = tuple(args[len(positional) :])
    for param in spec.kwonlyargs:
        scope.vars[param.arg] = (
            kwargs.pop(param.arg)
            if param.arg in kwargs
            else func.kw_defaults.get(param.arg, Unknown(f"argument {param.arg} of {func.name}"))
        )
    if spec.kwarg is not None:
        scope.vars[spec.kwarg.arg] = kwargs


def assign(interp: Interp, target: ast.expr, value: object, scope: Scope) -> None:
    if isinstance(target, ast.Name):
        scope.vars[target.id] = value
    elif isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, Unknown):
            values: list[object] = [Unknown(f"{value.why}[{i}]") for i in range(len(target.elts))]
        else:
            values = list(evaluate.iterate(value))
        star = next((i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)), None)
        if star is not None:
            tail = len(target.elts) - star - 1
            values = [*values[:star], values[star : len(values) - tail], *values[len(values) - tail :]]
        if len(values) != len(target.elts):
            raise EngineError(ValueError(f"cannot unpack {len(values)} values into {len(target.elts)}"))
        for element, item in zip(target.elts, values, strict=True):
            assign(interp, element.value if isinstance(element, ast.Starred) else element, item, scope)
    elif isinstance(target, ast.Attribute):
        interp.setattr(evaluate.eval_expr(interp, target.value, scope), target.attr, value)
    elif isinstance(target, ast.Subscript):
        container = evaluate.eval_expr(interp, target.value, scope)
        if not isinstance(container, Unknown):
            _setitem(container, evaluate.eval_expr(interp, target.slice, scope), value)


def _setitem(container: object, key: object, value: object) -> None:
    try:
        container[key] = value  # type: ignore[index]
    except Exception as exc:
        if not contains_unknown(key):
            raise EngineError(exc) from None


def exec_block(interp: Interp, body: list[ast.stmt], scope: Scope, *, loop: bool = False) -> None:
    for stmt in body:
        interp.loc = (scope.module.path, stmt.lineno)
        try:
            exec_stmt(interp, stmt, scope, loop=loop)
        except (Indeterminate, EngineError) as exc:
            if not scope.forgiving:
                raise
            interp.note(f"{scope.module.path}:{stmt.lineno}: skipped `{ast.unparse(stmt)[:70]}` ({exc})")
            if loop:
                raise ContinueFlow from None


def exec_stmt(interp: Interp, stmt: ast.stmt, scope: Scope, *, loop: bool = False) -> None:
    interp.steps += 1
    if interp.steps > MAX_STEPS:
        raise Indeterminate("too many steps")
    if isinstance(stmt, ast.Expr):
        if not isinstance(stmt.value, ast.Constant):
            evaluate.eval_expr(interp, stmt.value, scope)
    elif isinstance(stmt, ast.Assign):
        value = evaluate.eval_expr(interp, stmt.value, scope)
        for target in stmt.targets:
            assign(interp, target, value, scope)
    elif isinstance(stmt, ast.AnnAssign):
        if stmt.value is not None:
            assign(interp, stmt.target, evaluate.eval_expr(interp, stmt.value, scope), scope)
    elif isinstance(stmt, ast.AugAssign):
        current = evaluate.eval_expr(interp, stmt.target, scope)
        change = evaluate.eval_expr(interp, stmt.value, scope)
        inplace = {ast.Add: operator.iadd, ast.BitOr: operator.ior, ast.Sub: operator.isub}.get(type(stmt.op))
        result = evaluate.real_op(inplace or evaluate.BINOPS[type(stmt.op)], current, change)
        assign(interp, stmt.target, result, scope)
    elif isinstance(stmt, ast.If):
        _if(interp, stmt, scope, loop)
    elif isinstance(stmt, ast.For | ast.While):
        _loop(interp, stmt, scope)
    elif isinstance(stmt, ast.Return):
        raise ReturnFlow(evaluate.eval_expr(interp, stmt.value, scope) if stmt.value is not None else None)
    elif isinstance(stmt, ast.Raise):
        exc = evaluate.eval_expr(interp, stmt.exc, scope) if stmt.exc is not None else Unknown("re-raise")
        raise EngineError(interp.call(exc, [], {}) if isinstance(exc, type) else exc)
    elif isinstance(stmt, ast.Try):
        _try(interp, stmt, scope, loop)
    elif isinstance(stmt, ast.With):
        for item in stmt.items:
            if item.optional_vars is not None:
                assign(interp, item.optional_vars, Unknown("a context manager"), scope)
        exec_block(interp, stmt.body, scope, loop=loop)
    elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        scope.vars[stmt.name] = classes.make_func(interp, stmt, scope)
    elif isinstance(stmt, ast.ClassDef):
        scope.vars[stmt.name] = classes.make_class(interp, stmt, scope)
    elif isinstance(stmt, ast.Import | ast.ImportFrom):
        _import(interp, stmt, scope)
    elif isinstance(stmt, ast.Delete):
        for target in stmt.targets:
            _delete(interp, target, scope)
    elif isinstance(stmt, ast.Break):
        raise BreakFlow
    elif isinstance(stmt, ast.Continue):
        raise ContinueFlow
    elif not isinstance(stmt, ast.Pass | ast.Assert | ast.Global | ast.Nonlocal):
        raise Indeterminate(f"unsupported statement {type(stmt).__name__}")


def _if(interp: Interp, stmt: ast.If, scope: Scope, loop: bool) -> None:
    try:
        taken = truth(evaluate.eval_expr(interp, stmt.test, scope))
    except Indeterminate:
        exits = any(isinstance(n, ast.Return | ast.Raise | ast.Break | ast.Continue) for n in ast.walk(stmt))
        if exits or not scope.forgiving:
            raise
        interp.note(f"{scope.module.path}:{stmt.lineno}: both ways of `if {ast.unparse(stmt.test)[:60]}` kept")
        exec_block(interp, stmt.body, scope, loop=loop)
        exec_block(interp, stmt.orelse, scope, loop=loop)
        return
    exec_block(interp, stmt.body if taken else stmt.orelse, scope, loop=loop)


def _loop(interp: Interp, stmt: ast.For | ast.While, scope: Scope) -> None:
    count = 0
    items = evaluate.iterate(evaluate.eval_expr(interp, stmt.iter, scope)) if isinstance(stmt, ast.For) else None
    while True:
        if items is not None:
            item = next(items, StopIteration)
            if item is StopIteration:
                break
            assign(interp, stmt.target, item, scope)  # type: ignore[union-attr]
        elif not truth(evaluate.eval_expr(interp, stmt.test, scope)):  # type: ignore[union-attr]
            break
        count += 1
        if count > evaluate.MAX_LOOP:
            raise Indeterminate("a loop too long to follow")
        try:
            exec_block(interp, stmt.body, scope, loop=True)
        except BreakFlow:
            return
        except ContinueFlow:
            continue
    exec_block(interp, stmt.orelse, scope)


def _try(interp: Interp, stmt: ast.Try, scope: Scope, loop: bool) -> None:
    try:
        try:
            exec_block(interp, stmt.body, scope, loop=loop)
        except EngineError as error:
            for handler in stmt.handlers:
                if _catches(interp, handler, error.value, scope):
                    if handler.name:
                        scope.vars[handler.name] = error.value
                    exec_block(interp, handler.body, scope, loop=loop)
                    break
            else:
                raise
        else:
            exec_block(interp, stmt.orelse, scope, loop=loop)
    finally:
        exec_block(interp, stmt.finalbody, scope, loop=loop)


def _catches(interp: Interp, handler: ast.ExceptHandler, value: object, scope: Scope) -> bool:
    if handler.type is None:
        return True
    kinds = evaluate.eval_expr(interp, handler.type, scope)
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    for kind in kinds:
        if isinstance(kind, Unknown) or isinstance(value, Unknown):
            return True
        if isinstance(kind, type) and isinstance(value, kind):
            return True
    return False


def _import(interp: Interp, stmt: ast.Import | ast.ImportFrom, scope: Scope) -> None:
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                scope.vars[alias.asname] = interp.import_module(alias.name)
            else:
                top = alias.name.split(".")[0]
                scope.vars[top] = interp.import_module(top)
        return
    base = interp.resolve_relative(scope.module, stmt.module, stmt.level)
    for alias in stmt.names:
        if alias.name != "*":
            scope.vars[alias.asname or alias.name] = interp.import_from(base, alias.name)


def _delete(interp: Interp, target: ast.expr, scope: Scope) -> None:
    if isinstance(target, ast.Name):
        scope.vars.pop(target.id, None)
    elif isinstance(target, ast.Subscript):
        container = evaluate.eval_expr(interp, target.value, scope)
        key = evaluate.eval_expr(interp, target.slice, scope)
        if not isinstance(container, Unknown):
            try:
                del container[key]
            except Exception as exc:
                raise EngineError(exc) from None
