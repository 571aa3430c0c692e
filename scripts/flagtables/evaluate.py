"""Expressions and statements of the engine's source, evaluated over the interpreter's values.

The subset is what flag registration uses: assignments, calls, dict and list
work, comprehensions, `if`/`for`/`try`/`with`, nested functions and classes.
A branch on an Unknown value is `Indeterminate`: inside a function that was
handed the parser (a registration) the statement is skipped and noted, and
an `if` without a return or raise in it runs both ways, so a flag registered
under a runtime condition (an environment variable, the platform) is kept.
"""

from __future__ import annotations

import ast
import builtins
import functools
import operator
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from scripts.flagtables import classes, statements
from scripts.flagtables.values import (
    EngineError,
    Foreign,
    Indeterminate,
    StubMeta,
    SuperProxy,
    Unknown,
    contains_unknown,
    truth,
)

if TYPE_CHECKING:
    from scripts.flagtables.interp import Interp
    from scripts.flagtables.modules import Scope

# Builtins without effects outside the values they are given.
_PURE_BUILTINS = (
    "len",
    "list",
    "dict",
    "tuple",
    "set",
    "frozenset",
    "sorted",
    "reversed",
    "enumerate",
    "zip",
    "range",
    "min",
    "max",
    "sum",
    "any",
    "all",
    "str",
    "int",
    "float",
    "bool",
    "repr",
    "isinstance",
    "issubclass",
    "callable",
    "getattr",
    "hasattr",
    "type",
    "next",
    "iter",
    "map",
    "filter",
    "object",
    "abs",
    "round",
    "ord",
    "chr",
    "hash",
    "classmethod",
    "staticmethod",
    "property",
    "NotImplemented",
    "Ellipsis",
    "slice",
    "divmod",
    "format",
    "vars",
)
BUILTINS: dict[str, object] = {name: getattr(builtins, name) for name in _PURE_BUILTINS}
BUILTINS.update(
    {
        name: value
        for name, value in vars(builtins).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
)
BUILTINS["print"] = lambda *args, **kwargs: None
BUILTINS["None"] = None

BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow, ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_, ast.BitXor: operator.xor, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
}  # fmt: skip
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
MAX_STEPS = 3_000_000
MAX_LOOP = 100_000


def real_op(fn: Callable[[Any, Any], Any], left: object, right: object) -> object:
    try:
        return fn(left, right)
    except Exception as exc:
        if contains_unknown(left) or contains_unknown(right):
            return Unknown("an operation on an unknown value")
        raise EngineError(exc) from None


def eval_expr(interp: Interp, node: ast.expr, scope: Scope, *, annotation: bool = False) -> Any:
    if isinstance(node, ast.Constant):
        if annotation and isinstance(node.value, str):
            # A forward reference (`"ModelConfig"`): evaluated where it is written, like get_type_hints would.
            try:
                parsed = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return Unknown(f"annotation {node.value!r}")
            return eval_expr(interp, parsed, scope, annotation=True)
        return node.value
    if isinstance(node, ast.Name):
        return scope.lookup(node.id)
    if isinstance(node, ast.Attribute):
        return interp.getattr(eval_expr(interp, node.value, scope, annotation=annotation), node.attr)
    if isinstance(node, ast.Call):
        return _call(interp, node, scope)
    if isinstance(node, ast.Subscript):
        value = eval_expr(interp, node.value, scope, annotation=annotation)
        key = _subscript_key(interp, node, value, scope, annotation)
        if isinstance(value, Unknown):
            # A foreign generic (`SomeThirdPartyType[X]`) is still one foreign type.
            return (Foreign if isinstance(value, Foreign) else Unknown)(f"{value.why}[...]")
        return real_op(operator.getitem, value, key)
    if isinstance(node, ast.BinOp):
        left = eval_expr(interp, node.left, scope, annotation=annotation)
        right = eval_expr(interp, node.right, scope, annotation=annotation)
        if (isinstance(left, Unknown) or isinstance(right, Unknown)) and not isinstance(node.op, ast.BitOr):
            return Unknown("an operation on an unknown value")
        return real_op(BINOPS[type(node.op)], left, right)
    if isinstance(node, ast.BoolOp):
        result: object = None
        for value_node in node.values:
            result = eval_expr(interp, value_node, scope)
            if truth(result) == isinstance(node.op, ast.Or):
                return result
        return result
    if isinstance(node, ast.UnaryOp):
        operand = eval_expr(interp, node.operand, scope)
        if isinstance(node.op, ast.Not):
            return not truth(operand)
        if isinstance(operand, Unknown):
            return operand
        ops: dict[type[ast.unaryop], Callable[[Any], Any]] = {
            ast.USub: operator.neg,
            ast.UAdd: operator.pos,
            ast.Invert: operator.invert,
        }
        return ops[type(node.op)](operand)
    if isinstance(node, ast.Compare):
        return _compare(interp, node, scope)
    if isinstance(node, ast.IfExp):
        branch = node.body if truth(eval_expr(interp, node.test, scope)) else node.orelse
        return eval_expr(interp, branch, scope)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = _items(interp, node.elts, scope, annotation)
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        out: dict[Any, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            value = eval_expr(interp, value_node, scope)
            if key_node is None:
                if isinstance(value, Unknown):
                    return Unknown("a dict spread from an unknown value")
                out.update(value)
            else:
                out[eval_expr(interp, key_node, scope)] = value
        return out
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        return _comprehension(interp, node, scope)
    if isinstance(node, ast.Lambda):
        return classes.make_func(interp, node, scope)
    if isinstance(node, ast.JoinedStr):
        return _fstring(interp, node, scope)
    if isinstance(node, ast.NamedExpr):
        value = eval_expr(interp, node.value, scope)
        statements.assign(interp, node.target, value, scope)
        return value
    if isinstance(node, ast.Slice):
        parts = [eval_expr(interp, p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts)
    if isinstance(node, ast.Starred):
        return eval_expr(interp, node.value, scope)
    if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
        return _yield(interp, node, scope)
    return Unknown(f"unsupported expression {type(node).__name__}")


def _subscript_key(interp: Interp, node: ast.Subscript, value: object, scope: Scope, annotation: bool) -> object:
    """In a type hint, strings are forward references, except Literal's values and Annotated's metadata."""
    if annotation and value is typing.Literal:
        annotation = False
    if annotation and value is typing.Annotated and isinstance(node.slice, ast.Tuple):
        first, *rest = node.slice.elts
        return (eval_expr(interp, first, scope, annotation=True), *(eval_expr(interp, r, scope) for r in rest))
    return eval_expr(interp, node.slice, scope, annotation=annotation)


def _items(interp: Interp, nodes: list[ast.expr], scope: Scope, annotation: bool) -> list[object]:
    items: list[object] = []
    for item in nodes:
        value = eval_expr(interp, item, scope, annotation=annotation)
        if isinstance(item, ast.Starred):
            if isinstance(value, Unknown):
                raise Indeterminate("a starred unknown value")
            items.extend(value)
        else:
            items.append(value)
    return items


def forgiving(interp: Interp, node: ast.expr, scope: Scope) -> object:
    """An argument: what cannot be evaluated is passed on as Unknown rather than failing the call."""
    try:
        return eval_expr(interp, node, scope)
    except (Indeterminate, EngineError) as exc:
        return Unknown(f"{ast.unparse(node)[:60]} ({exc})")


def _call(interp: Interp, node: ast.Call, scope: Scope) -> object:
    if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
        method: Scope | None = scope
        while method is not None and method.owner is None:
            method = method.parent
        if method is None or method.owner is None:
            return Unknown("super() outside a method")
        return SuperProxy(method.owner, method.first)
    fn = eval_expr(interp, node.func, scope)
    saved = interp.loc
    args: list[object] = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            value = forgiving(interp, arg.value, scope)
            if isinstance(value, Unknown):
                raise Indeterminate(f"*{ast.unparse(arg.value)}")
            args.extend(iterate(value))
        else:
            args.append(forgiving(interp, arg, scope))
    kwargs: dict[str, object] = {}
    for keyword in node.keywords:
        value = forgiving(interp, keyword.value, scope)
        if keyword.arg is not None:
            kwargs[keyword.arg] = value
        elif isinstance(value, Unknown):
            kwargs["**"] = value  # a Recorder notes it; other callees drop it
        else:
            kwargs.update(value)  # type: ignore[call-overload]
    interp.loc = saved
    return interp.call(fn, args, kwargs)


def _compare(interp: Interp, node: ast.Compare, scope: Scope) -> bool:
    left = eval_expr(interp, node.left, scope)
    for op, right_node in zip(node.ops, node.comparators, strict=True):
        right = eval_expr(interp, right_node, scope)
        # An Unknown inside a container stands for some other object (a third-party class in a set of
        # type hints): equality and membership keep their real meaning. Only an Unknown operand is open.
        if _open(left) or _open(right):
            raise Indeterminate(f"comparison {ast.unparse(node)[:60]}")
        result = real_op(_CMPOPS[type(op)], left, right)
        if not result:
            return False
        left = right
    return True


def _open(value: object) -> bool:
    return isinstance(value, Unknown) and not isinstance(value, Foreign)


def _comprehension(
    interp: Interp, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp, scope: Scope
) -> object:
    from scripts.flagtables.modules import Scope as ScopeClass

    inner = ScopeClass(scope.module, scope)
    out: list[object] = []

    def loop(index: int) -> None:
        if index == len(node.generators):
            if isinstance(node, ast.DictComp):
                out.append((eval_expr(interp, node.key, inner), eval_expr(interp, node.value, inner)))
            else:
                out.append(eval_expr(interp, node.elt, inner))
            return
        gen = node.generators[index]
        for item in iterate(eval_expr(interp, gen.iter, scope if index == 0 else inner)):
            statements.assign(interp, gen.target, item, inner)
            if all(truth(eval_expr(interp, cond, inner)) for cond in gen.ifs):
                loop(index + 1)

    loop(0)
    if isinstance(node, ast.DictComp):
        return dict(out)  # type: ignore[arg-type]
    if isinstance(node, ast.SetComp):
        return set(out)
    return iter(out) if isinstance(node, ast.GeneratorExp) else out


def iterate(value: object) -> Iterator[Any]:
    if isinstance(value, Unknown):
        raise Indeterminate(f"iteration over {value!r}")
    try:
        items = list(value)  # type: ignore[call-overload]
    except TypeError as exc:
        raise EngineError(exc) from None
    if len(items) > MAX_LOOP:
        raise Indeterminate("a loop too long to follow")
    return iter(items)


def _fstring(interp: Interp, node: ast.JoinedStr, scope: Scope) -> object:
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value))
            continue
        assert isinstance(value, ast.FormattedValue)
        inner = eval_expr(interp, value.value, scope)
        if isinstance(inner, Unknown):
            return Unknown("an f-string of an unknown value")
        converters: dict[int, Callable[[object], str]] = {-1: str, 115: str, 114: repr, 97: ascii}
        convert = converters[value.conversion]
        spec = _fstring(interp, value.format_spec, scope) if isinstance(value.format_spec, ast.JoinedStr) else ""
        if isinstance(spec, Unknown):
            return spec
        parts.append(format(inner if value.conversion == -1 else convert(inner), str(spec)))
    return "".join(parts)


def _yield(interp: Interp, node: ast.Yield | ast.YieldFrom | ast.Await, scope: Scope) -> object:
    holder: Scope | None = scope
    while holder is not None and holder.yields is None:
        holder = holder.parent
    value = eval_expr(interp, node.value, scope) if node.value is not None else None
    if holder is None or holder.yields is None or isinstance(node, ast.Await):
        return Unknown("await") if isinstance(node, ast.Await) else None
    if isinstance(node, ast.YieldFrom):
        holder.yields.extend(iterate(value))
    else:
        holder.yields.append(value)
    return None


@functools.cache
def is_generator(node: ast.AST) -> bool:
    if isinstance(node, ast.Lambda):
        return False
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        if isinstance(child, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(child))
    return False


def class_lazy(interp: Interp, klass: StubMeta, name: str) -> object:
    return classes.class_lazy(interp, klass, name)
