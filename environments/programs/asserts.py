"""Splitting a task's asserts on the host, at load time: each `assert` becomes a
`Check` (the call and the builtins around it run in the sandbox; the expected
value stays here), or is refused with ValueError naming it and why
(``decompose``); ``assert_tests`` and ``humaneval_tests`` build a task's
tests from them (HumanEval's check() falls back to replay or to running in the
sandbox; see the package docstring)."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import sys
from typing import Any, Sequence

from environments import sandbox
from environments.programs.forms import DEFAULT_TIMEOUT_S, Check, ProgramTests, Wrap
from environments.programs.harness.wire import APPLIED
from environments.programs.replay import record_calls

# The same builtins on literals, for expected values (`== set([1, 2])`), on the host; and
# `sys.getsizeof(<literal>)` (MBPP task 596), the sandbox's interpreter being this one.
_HOST_FUNCTIONS: dict[str, Any] = {name: getattr(builtins, name) for name in APPLIED} | {"sys.getsizeof": sys.getsizeof}
_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
          ast.Pow: lambda a, b: a**b}


def _dotted(node: ast.AST) -> str:
    """"name" or "module.name" for a Name or one Attribute of a Name, else ""."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


def _constant(node: ast.AST) -> Any:
    """A literal, or constant arithmetic on literals (`3 * 19`, `2.0 / 3.0`, `'ab' + 'c'`),
    or one of _HOST_FUNCTIONS applied to literals; ValueError otherwise. Bounded: no huge
    powers or strings."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        pass
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        a, b = _constant(node.left), _constant(node.right)
        if isinstance(node.op, ast.Pow) and not (type(a) in (int, float) and type(b) in (int, float) and abs(b) <= 64 and abs(a) <= 1 << 64):
            raise ValueError("power out of bounds")
        if isinstance(node.op, ast.Mult) and any(type(x) in (str, bytes, list, tuple) for x in (a, b)):
            count = b if type(a) in (str, bytes, list, tuple) else a
            if type(count) is not int or count > 10000:
                raise ValueError("repetition out of bounds")
        try:
            return _ARITH[type(node.op)](a, b)
        except (ArithmeticError, TypeError) as e:
            raise ValueError(str(e)) from None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = [_constant(x) for x in node.elts]
        return {ast.Tuple: tuple, ast.List: list, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _constant(node.operand)
        if type(value) not in (int, float):
            raise ValueError("not a number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Call) and _dotted(node.func) in _HOST_FUNCTIONS and node.args:
        args = [_constant(a) for a in node.args]
        kwargs = {kw.arg: _constant(kw.value) for kw in node.keywords if kw.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise ValueError("**kwargs")
        try:
            return _HOST_FUNCTIONS[_dotted(node.func)](*args, **kwargs)
        except (ArithmeticError, TypeError, ValueError) as e:
            raise ValueError(str(e)) from None
    raise ValueError("not a constant")


def _literal(node: ast.AST, what: str, source: str) -> Any:
    try:
        return _constant(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"cannot decompose test {source!r}: {what} {ast.unparse(node)!r} is not a literal") from None


# Node types an argument expression may use (names bound by the test setup, calls,
# attributes, containers, operators): no lambdas, comprehensions or assignments.
_EXPRESSION_NODES = (ast.Expression, ast.Name, ast.Load, ast.Constant, ast.Call, ast.keyword, ast.Attribute,
                     ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.Subscript, ast.Slice,
                     ast.unaryop, ast.operator)


def _expression(node: ast.AST, names: frozenset[str], source: str) -> str:
    """Source of an argument evaluated in the program's namespace (after the test
    setup); ValueError naming what it may not use. A bare name must be a builtin or
    bound by the test setup code / imports; a called name (`Pair(1, 2)`) may also be
    the program's own, as MBPP's harness ran the tests in the program's namespace."""
    text = ast.unparse(node)
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    for sub in ast.walk(node):
        if not isinstance(sub, _EXPRESSION_NODES):
            raise ValueError(f"cannot decompose test {source!r}: argument {text!r} uses {type(sub).__name__}, "
                             "not allowed in a test's arguments")
        if isinstance(sub, ast.Name) and id(sub) not in called and sub.id not in names and not hasattr(builtins, sub.id):
            raise ValueError(f"cannot decompose test {source!r}: argument {text!r} uses the name {sub.id!r}, "
                             "which is neither a literal, a builtin, nor bound by the row's test setup code or imports")
    return text


def _call(node: ast.AST, target: str | None, source: str, names: frozenset[str] | None) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(function, args, kwargs) of a call on a plain name; each argument is a literal's
    source or (names not None) an expression over `names` (see _expression)."""
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)

    def argument(value: ast.AST) -> str:
        try:
            return _source_of(_constant(value), value, source)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            if names is None:
                raise ValueError(f"cannot decompose test {source!r}: argument {ast.unparse(value)!r} is not a literal") from None
            return _expression(value, names, source)

    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise ValueError(f"cannot decompose test {source!r}: starred argument")
        args.append(argument(arg))
    kwargs = []
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"cannot decompose test {source!r}: **kwargs argument")
        kwargs.append((kw.arg, argument(kw.value)))
    if names is not None and hasattr(builtins, node.func.id):
        # `isinstance(f(1), int)`: a builtin (not one of APPLIED) around the call of the
        # function tested. A program's own function may share a builtin's name (MBPP 126's
        # `sum(10, 15)`), but then it gets no calls as arguments.
        for arg in [*node.args, *(kw.value for kw in node.keywords)]:
            if any(isinstance(sub, ast.Call) for sub in ast.walk(arg)):
                raise ValueError(f"cannot decompose test {source!r}: builtin {node.func.id}() is applied to "
                                 f"{ast.unparse(arg)!r}; only {', '.join(APPLIED)} may wrap the call tested")
    return node.func.id, tuple(args), tuple(kwargs)


def _source_of(value: Any, node: ast.AST, source: str) -> str:
    """Literal source for `value` that ast.literal_eval (in the sandbox) reads back."""
    text = ast.unparse(node)
    try:
        if ast.literal_eval(text) == value:
            return text
    except (ValueError, TypeError, SyntaxError):
        pass
    text = repr(value)
    try:
        ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError):
        raise ValueError(f"cannot decompose test {source!r}: argument {ast.unparse(node)!r} has no literal form") from None
    return text


def _is_call(node: ast.AST, target: str | None) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (target is None or node.func.id == target)


def _target_call(node: ast.AST, target: str | None, source: str) -> tuple[tuple[Wrap, ...], ast.Call] | None:
    """(wrappers, call) for a call on the target, or one inside builtins of APPLIED
    (`int(f(x))`, `sorted(set(f(x)))`, `round(f(x), 2)`: innermost first), else None.
    A builtin's name with a call as its first argument is the builtin, not the target."""
    wraps: list[Wrap] = []
    while (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in APPLIED
           and node.args and isinstance(node.args[0], ast.Call) and not isinstance(node.args[0].func, ast.Attribute)):
        extra = tuple(_source_of(_literal(a, f"{node.func.id}() argument", source), a, source) for a in node.args[1:])
        named = tuple((kw.arg, _source_of(_literal(kw.value, f"{node.func.id}() argument", source), kw.value, source))
                      for kw in node.keywords if kw.arg is not None)
        if len(named) != len(node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            raise ValueError(f"cannot decompose test {source!r}: {node.func.id}() with unpacked arguments")
        wraps.append((node.func.id, extra, named))
        node = node.args[0]
    if not _is_call(node, target):
        return None
    return tuple(reversed(wraps)), node


def _number(node: ast.AST, source: str) -> float:
    value = _literal(node, "tolerance", source)
    if type(value) not in (int, float):
        raise ValueError(f"cannot decompose test {source!r}: tolerance {value!r} is not a number")
    return float(value)


def _checked(wrapped: tuple[tuple[Wrap, ...], ast.Call], target: str | None, source: str,
             names: frozenset[str] | None, **fields: Any) -> Check:
    wraps, call = wrapped
    return Check(*_call(call, target, source, names), source=source, wrap=wraps, **fields)


def decompose(stmt: ast.Assert, target: str | None, source: str, names: frozenset[str] | None = None) -> Check:
    """The Check for one assert statement; ValueError (naming it and why) if it does not decompose.

    target: the only function name calls may use (e.g. "candidate"); None: any name.
    names: the names the test setup binds, which (with builtins) arguments may use
      as expressions evaluated in the sandbox; None: literal arguments only.
    """
    test = stmt.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _target_call(test.operand, target, source):
        wraps, call = _target_call(test.operand, target, source)
        return _checked((wraps + (("bool", (), ()),), call), target, source, names, kind="falsy")
    if _target_call(test, target, source):
        wraps, call = _target_call(test, target, source)
        return _checked((wraps + (("bool", (), ()),), call), target, source, names, kind="truthy")
    if isinstance(test, ast.Call) and _dotted(test.func) == "math.isclose":
        # math.isclose(f(x), y, rel_tol=..., abs_tol=...), either argument order
        if len(test.args) != 2:
            raise ValueError(f"cannot decompose test {source!r}: math.isclose takes two values")
        a, b = test.args
        sides = [(_target_call(x, target, source), y) for x, y in ((a, b), (b, a))]
        sides = [(w, y) for w, y in sides if w is not None]
        if len(sides) != 1:
            raise ValueError(f"cannot decompose test {source!r}: math.isclose needs one call of the function "
                             "tested and one literal")
        wrapped, want_node = sides[0]
        tol = {"rel_tol": 1e-9, "abs_tol": 0.0}
        for kw in test.keywords:
            if kw.arg not in tol:
                raise ValueError(f"cannot decompose test {source!r}: math.isclose keyword {kw.arg!r}")
            tol[kw.arg] = _number(kw.value, source)
        expected = _literal(want_node, "expected value", source)
        if type(expected) not in (int, float):
            raise ValueError(f"cannot decompose test {source!r}: math.isclose expected value {expected!r} is not a number")
        return _checked(wrapped, target, source, names, kind="close", expected=expected, **tol)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            for call_side, want_node in ((left, right), (right, left)):
                wrapped = _target_call(call_side, target, source)
                if wrapped is None:
                    continue
                if _target_call(want_node, target, source) is not None:
                    raise ValueError(f"cannot decompose test {source!r}: both sides call the function tested; "
                                     "the expected side must be a literal")
                try:
                    expected = _constant(want_node)
                except (ValueError, TypeError, MemoryError, RecursionError):
                    raise ValueError(f"cannot decompose test {source!r}: expected value {ast.unparse(want_node)!r} "
                                     "is not a literal (expected values are computed on the host, from literals "
                                     "and the builtins " + ", ".join(_HOST_FUNCTIONS) + ")") from None
                if isinstance(op, ast.Is):
                    if not any(expected is v for v in (None, True, False)):
                        raise ValueError(f"cannot decompose test {source!r}: 'is' compares with {expected!r}")
                    return _checked(wrapped, target, source, names, kind="is", expected=expected)
                return _checked(wrapped, target, source, names, kind="eq", expected=expected)
        if isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and _dotted(left.func) == "abs" and len(left.args) == 1:
            # abs(f(x) - y) < tol, abs(y - f(x)) <= tol
            inner = left.args[0]
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                a, b = inner.left, inner.right
                sides = [(w, y) for w, y in ((_target_call(a, target, source), b), (_target_call(b, target, source), a)) if w]
                if len(sides) == 1:
                    wrapped, want_node = sides[0]
                    expected = _literal(want_node, "expected value", source)
                    if type(expected) not in (int, float):
                        raise ValueError(f"cannot decompose test {source!r}: {expected!r} is not a number")
                    return _checked(wrapped, target, source, names, kind="close", expected=expected,
                                    abs_tol=_number(right, source))
    raise ValueError(
        f"cannot decompose test {source!r}: expected `assert f(...) == <literal>` (f's result may be wrapped in "
        f"one of {', '.join(APPLIED)}), `assert f(...)`, `assert not f(...)`, `assert f(...) is None/True/False`, "
        "`assert math.isclose(f(...), <number>)` or `assert abs(f(...) - <number>) < <tolerance>`"
    )


def _parse(text: str, what: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise ValueError(f"{what} is not valid Python: {e.msg} (line {e.lineno})") from None


def _bound_names(module: ast.Module) -> frozenset[str]:
    """Names a module binds (assignments, imports, defs, loop and with targets)."""
    names = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return frozenset(names)


def assert_tests(asserts: Sequence[str], *, setup: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, limits: sandbox.Limits = sandbox.Limits()) -> ProgramTests:
    """MBPP-style tests: each string is one `assert f(...) == ...` statement.

    setup: trusted code run in the sandbox, in the program's namespace after the
      program and before the calls (MBPP's test_imports and test_setup_code, as
      its harness exec'd test_setup_code then the asserts after the program); the
      calls' arguments may use the names it binds. Never the expected values:
      those are literals kept on the host.
    Raises ValueError naming the first assert that cannot be decomposed, and why;
    such tests are never run in the candidate's process."""
    names = _bound_names(_parse(setup, "the test setup code"))
    checks = []
    for text in asserts:
        module = _parse(text, f"test {text!r}")
        if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
            raise ValueError(f"test {text!r} must be exactly one assert statement")
        checks.append(decompose(module.body[0], None, text.strip(), names))
    if not checks:
        raise ValueError("a program task needs at least one test")
    return ProgramTests(form="asserts", entry=checks[0].function, checks=tuple(checks), setup=setup, timeout_s=timeout_s, limits=limits)


def humaneval_tests(test: str, entry_point: str, *, prelude: str = "", reference: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, limits: sandbox.Limits = sandbox.Limits()) -> ProgramTests:
    """HumanEval-style tests: `test` defines `check(candidate)`.

    Decomposed into host-compared calls when check() holds only decomposable
    asserts (plus `assert True`, docstrings, `pass`) and the module only
    imports, assigns METADATA-like constants and defines check; otherwise
    check() runs in the sandbox (form "check"; see the module docstring).
    prelude: trusted code run before `test` for check()'s helpers (HumanEval:
    the prompt). reference: a trusted correct program (HumanEval: prompt +
    canonical solution); when given, a check() that does not decompose is run
    once on the host against it to record the calls it makes, and grading
    replays them (form "replay", the same guarantee as decomposed asserts);
    without one, or when an argument has no literal form, check() runs in the
    sandbox (form "check")."""
    module = _parse(test, "the test code")
    checks = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if len(checks) != 1 or not checks[0].args.args:
        raise ValueError("the test code must define exactly one check(candidate) function")
    fn = checks[0]
    target = fn.args.args[0].arg
    lines = test.splitlines()
    decomposed: list[Check] | None = []
    others = [node for node in module.body if node is not fn]
    if not all(isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.Expr)) for node in others):
        decomposed = None
    for stmt in fn.body if decomposed is not None else ():
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            continue
        if isinstance(stmt, ast.Expr) and _is_call(stmt.value, "print"):
            continue  # a debugging print in check(): it tests nothing
        if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and stmt.test.value is True:
            continue
        if not isinstance(stmt, ast.Assert):
            decomposed = None
            break
        source = "\n".join(lines[stmt.lineno - 1 : stmt.end_lineno]).strip()
        try:
            check = decompose(stmt, target, source)
        except ValueError:
            decomposed = None
            break
        decomposed.append(dataclasses.replace(check, function=entry_point))
    if decomposed:
        return ProgramTests(form="asserts", entry=entry_point, checks=tuple(decomposed), timeout_s=timeout_s, limits=limits)
    if reference:
        calls = record_calls(test, entry_point, prelude, reference)
        if calls is not None:
            return ProgramTests(form="replay", entry=entry_point, replay=calls, check_source=test, prelude=prelude, timeout_s=timeout_s, limits=limits)
    return ProgramTests(form="check", entry=entry_point, check_source=test, prelude=prelude, timeout_s=timeout_s, limits=limits)
