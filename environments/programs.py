"""Grading whole programs: the model writes a function or a program, a task's tests run it.

    from environments.programs import assert_tests, grade_program
    tests = assert_tests(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    grade_program("def add(a, b):\\n    return a + b", tests)   # Grade(PASS, 1.0, ...)

Three forms of tests, and what each guarantees:

* `assert_tests` (MBPP style: `assert f(1, 2) == 3`, `assert y == f(x)`,
  `assert f(x)`, `assert not f(x)`, `assert f(x) is None`,
  `assert math.isclose(f(x), y)`, `assert abs(f(x) - y) < tol`, with the call
  optionally inside builtins of APPLIED: `int(f(x)) == 35`,
  `sorted(f(x)) == [...]`, `round(f(x), 2) == 0.33`). Each assert is
  decomposed on the host, at load time: the call, with the builtins around it,
  runs in the sandbox (its arguments literals, or expressions over the names
  the task's trusted setup code binds, which runs after the program, as
  MBPP's test_setup_code did); the expected value (a literal) never leaves
  the host; the result comes back as plain tagged data (exact builtin types;
  a Counter, defaultdict or OrderedDict as the dict it is) that the host
  compares with Python's own == (floats within a tolerance). No candidate
  object exists on the host, so there is nothing whose __eq__ could lie: a
  rigged `__eq__`, patched asserts or builtins (the harness keeps its own),
  `sys.exit(0)`, printing "PASS" or reading the caller's frames earn nothing:
  the candidate must produce the expected value itself. An assert that does
  not decompose is refused with ValueError naming it and why.
* `humaneval_tests` (`def check(candidate): assert candidate(...) == ...`):
  decomposed the same way when every statement of check() is such an assert
  (156 of HumanEval's 164 problems), with the same guarantee. Otherwise
  (loops, computed expectations), given the task's trusted reference
  solution, check() runs once on the host against it to record the calls it
  makes (their arguments as literals); grading runs those calls in the
  sandbox and then check() on the host over the returned plain values (form
  "replay", the remaining 8 HumanEval problems): the same guarantee again.
  `import random` in check() gets a private generator seeded the same for
  the recording and every replay.
  Without a reference (or with arguments that have no literal form) check()
  itself runs in the sandbox, in the
  candidate's process: the candidate is loaded first, its entry point is
  wrapped so that every value it returns is deep-copied into exact builtin
  types (anything else raises), and check() sees only the copies, with the
  task's trusted prelude (the prompt's helpers) run fresh for it. That stops
  rigged objects, sys.exit, printed verdicts and a patched `assert` in the
  candidate's own module, but not a candidate that deliberately attacks the
  harness in its own process (walking frames to forge the result frame,
  patching builtins check() uses): those grades trust the candidate not to
  be adversarial against the harness. `ProgramTests.form` says which applies.
* `stdio_tests` (competitive programming: input -> expected stdout): one
  sandboxed job per input; the program runs as `__main__` with the input on
  fd 0 / sys.stdin and fd 1 / sys.stdout redirected to a file in its work
  directory; the host compares the output, with trailing whitespace of each
  line and trailing blank lines ignored. Expected outputs never leave the
  host. `sys.exit(0)` (or `exit()`) after printing is a normal end;
  a nonzero exit status or an exception is ERROR.

Verdicts follow the code family (environments.grading): PASS with reward 1
iff every test passes, else reward 0 with FAIL (wrong value or output),
ERROR (raised, or ended without results), MALFORMED (SyntaxError), TIMEOUT,
OOM, or SANDBOX_ERROR (infrastructure; never the model's fault). Feedback
names the first failing test with its input, expected and actual value (or
the error's last line), cut to FEEDBACK_CHARS.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import math
import random
import sys
import types
from typing import Any, Sequence

from environments import sandbox
from environments.grading import FLOAT_RTOL, _error_grade, _process_failure
from environments.verdicts import Grade, Verdict, failed, passed

FEEDBACK_CHARS = 400
DEFAULT_TIMEOUT_S = 5.0
# Candidate-side shown values in feedback are cut to this many characters.
_SHOWN_CHARS = 120
_CHUNK = 4000  # results travel as a list of str chunks (worker._encode_value keeps str <= 4096)


# A builtin applied to a call's result in the sandbox: (name in APPLIED, literal
# sources of its further positional arguments, of its keyword arguments).
Wrap = tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]


@dataclasses.dataclass(frozen=True)
class Check:
    """One decomposed assert: `call` (wrapped) runs in the sandbox, the rest stays on the host.

    kind: "eq" (== expected, Python's ==), "is" (is None/True/False), "close"
      (within rel_tol/abs_tol of expected), "truthy", "falsy" (the call's
      result through bool(), applied in the sandbox as for `assert f(x)`).
    args: each a literal's source, or an expression over the names the test
      setup binds (evaluated in the program's namespace after the setup).
    wrap: the builtins applied to the result in the sandbox, innermost first.
    source: the assert as written (named in errors and feedback).
    """

    function: str
    args: tuple[str, ...]
    kwargs: tuple[tuple[str, str], ...]
    kind: str
    expected: Any = None
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    source: str = ""
    wrap: tuple[Wrap, ...] = ()

    @property
    def call(self) -> str:
        parts = list(self.args) + [f"{k}={v}" for k, v in self.kwargs]
        return f"{self.function}({', '.join(parts)})"

    @property
    def applied(self) -> str:
        """The call inside its wrappers, as the test wrote it (`int(f(5, 3))`)."""
        text = self.call
        for i, (name, extra, named) in enumerate(self.wrap):
            if name == "bool" and i == len(self.wrap) - 1 and self.kind in ("truthy", "falsy"):
                break  # `assert f(x)`: the bool() is implied
            text = f"{name}({', '.join([text, *extra, *(f'{k}={v}' for k, v in named)])})"
        return text


@dataclasses.dataclass(frozen=True)
class ProgramTests:
    """The tests of one program task (build with assert_tests / humaneval_tests / stdio_tests).

    form: "asserts" (decomposed; host-compared), "replay" (check() run on the
      host over results of calls run in the sandbox), "check" (check() run in
      the sandbox; see the module docstring) or "stdio" (stdin -> stdout pairs).
    entry: the function the candidate must define ("" for stdio programs).
    replay: for "replay", the calls check() makes, each (literal sources of the
      positional arguments, (name, literal source) of the keyword arguments).
    """

    form: str
    entry: str = ""
    checks: tuple[Check, ...] = ()
    replay: tuple[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], ...] = ()
    check_source: str = ""
    prelude: str = ""
    setup: str = ""  # "asserts": trusted code run after the program, before the calls
    io_pairs: tuple[tuple[str, str], ...] = ()
    # CPU seconds of the whole test job (program, setup and calls), so other jobs on the cores
    # never turn a correct answer into TIMEOUT; a wall-clock ceiling (see sandbox.run) stops sleeps.
    timeout_s: float = DEFAULT_TIMEOUT_S
    limits: sandbox.Limits = sandbox.Limits()


# ----------------------------------------------------------------------------- loading


# Builtins a test may apply to a call's result (`int(f(x)) == 35`, `sorted(f(x)) == [...]`,
# `round(f(x), 2) == 0.33`): they run in the sandbox, on the returned object, as part of the
# call (the harness's own copies, taken before the candidate loads), and the host compares
# what they return. Pure and bounded by the job's limits; their extra arguments are literals.
APPLIED = ("int", "float", "str", "bool", "len", "abs", "round", "list", "tuple", "set", "frozenset", "sorted")
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
        calls = _record_calls(test, entry_point, prelude, reference)
        if calls is not None:
            return ProgramTests(form="replay", entry=entry_point, replay=calls, check_source=test, prelude=prelude, timeout_s=timeout_s, limits=limits)
    return ProgramTests(form="check", entry=entry_point, check_source=test, prelude=prelude, timeout_s=timeout_s, limits=limits)


class _NoLiteral(Exception):
    pass


def _literal_source(value: Any) -> str | None:
    """repr(value) when it reads back (ast.literal_eval) as the same value of the
    same types (its repr again), else None (nan, objects, recursive values)."""
    try:
        text = repr(value)
        return text if repr(ast.literal_eval(text)) == text else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _call_sources(args: tuple, kwargs: dict) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    sources = tuple(_literal_source(a) for a in args)
    named = tuple((k, _literal_source(v)) for k, v in kwargs.items())
    if None in sources or any(v is None for _, v in named):
        return None
    return sources, named


def _seeded_random() -> types.ModuleType:
    """A private `random` module drawing from random.Random(0): a check() that
    draws unseeded inputs (HumanEval/38 does) makes the same calls in the
    recording and in every replay, whatever other threads do with `random`."""
    rng = random.Random(0)
    module = types.ModuleType("random")
    for name in dir(random):
        if not name.startswith("_"):
            setattr(module, name, getattr(rng, name, None) or getattr(random, name))
    return module


def _run_check(test: str, entry: str, prelude: str, candidate: Any) -> None:
    """Runs the task's trusted check(candidate) here, on the host, with `candidate`
    also bound to the entry point's name (as HumanEval's harness does) and
    `import random` giving a freshly seeded private generator."""
    private = _seeded_random()

    def importer(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random" and level == 0:
            return private
        return builtins.__import__(name, globals, locals, fromlist, level)

    checker: dict[str, Any] = {"__name__": "__check__",
                               "__builtins__": dict(vars(builtins), __import__=importer)}
    exec(compile(prelude, "<prelude>", "exec"), checker)
    checker[entry] = candidate
    exec(compile(test, "<test>", "exec"), checker)
    checker["check"](candidate)


def _record_calls(test: str, entry: str, prelude: str, reference: str):
    """The calls check() makes of its candidate when that is the trusted
    `reference`, as literal sources; None when an argument has no literal form."""
    namespace: dict[str, Any] = {"__name__": "__reference__"}
    exec(compile(reference, "<reference>", "exec"), namespace)
    solution = namespace[entry]
    calls = []

    def recorder(*args, **kwargs):
        sources = _call_sources(args, kwargs)  # before the call, which may mutate them
        if sources is None:
            raise _NoLiteral
        calls.append(sources)
        return solution(*args, **kwargs)

    try:
        _run_check(test, entry, prelude, recorder)
    except _NoLiteral:
        return None
    except Exception as e:
        raise ValueError(f"the reference solution of {entry!r} fails its own check(): {type(e).__name__}: {e}") from e
    return tuple(calls)


def stdio_tests(pairs: Sequence[tuple[str, str]], *, timeout_s: float = 2.0, limits: sandbox.Limits = sandbox.Limits()) -> ProgramTests:
    """Competitive-programming tests: (stdin, expected stdout) pairs."""
    pairs = tuple((str(i), str(o)) for i, o in pairs)
    if not pairs:
        raise ValueError("a program task needs at least one test")
    return ProgramTests(form="stdio", io_pairs=pairs, timeout_s=timeout_s, limits=limits)


# ----------------------------------------------------------------------------- sandbox side

# Runs in the sandbox. Values cross as tagged plain data built from exact
# builtin types only; everything else is {"opaque": type name}.
_ENCODER = r'''
import builtins as _builtins, collections as _collections, json as _json, sys as _sys, traceback as _tb

# Taken when the harness loads, before the candidate's program runs (which may
# patch builtins or collections): the only code that decides how a value is sent.
_rlpt_dict_items = dict.items
# Dicts by another name: Python's == compares them with a dict as a dict, and the
# expected side is always a plain dict, so they cross as one (their exact types only).
_rlpt_dicts = (dict, _collections.Counter, _collections.OrderedDict, _collections.defaultdict)
_rlpt_applied = {name: getattr(_builtins, name) for name in %(applied)r}

def _rlpt_tag(v, depth=0):
    if depth > 64:
        raise ValueError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is int or t is float or t is str:
        return v
    if t is list:
        return {"list": [_rlpt_tag(x, depth + 1) for x in v]}
    if t is tuple:
        return {"tuple": [_rlpt_tag(x, depth + 1) for x in v]}
    if t in _rlpt_dicts:
        return {"dict": [[_rlpt_tag(k, depth + 1), _rlpt_tag(x, depth + 1)] for k, x in _rlpt_dict_items(v)]}
    if t is set or t is frozenset:
        return {t.__name__: [_rlpt_tag(x, depth + 1) for x in v]}
    if t is bytes:
        return {"bytes": v.hex()}
    if t is complex:
        return {"complex": [v.real, v.imag]}
    return {"opaque": t.__name__}

def _rlpt_last(e):
    try:
        return _tb.format_exception_only(type(e), e)[-1].strip()[:500]
    except BaseException:
        return type(e).__name__

def _rlpt_line(e, filename):
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line

def _rlpt_chunks(payload):
    text = _json.dumps(payload)
    return [text[i : i + %(chunk)d] for i in range(0, len(text), %(chunk)d)] or [""]

def _rlpt_load(source, name):
    namespace = {"__name__": name}
    try:
        code = compile(source, "<candidate>", "exec")
    except BaseException as e:
        return None, {"phase": "compile", "error": _rlpt_last(e), "error_type": type(e).__name__}
    try:
        exec(code, namespace)
    except BaseException as e:
        return None, {"phase": "load", "error": _rlpt_last(e), "error_type": type(e).__name__}
    return namespace, None
''' % {"chunk": _CHUNK, "applied": APPLIED}

_CALLS_HARNESS = _ENCODER + r'''
def _rlpt_argument(source, namespace):
    import ast as _ast
    try:
        return _ast.literal_eval(source)
    except (ValueError, TypeError, SyntaxError):  # an expression over the names the setup bound
        return eval(source, namespace)

def _rlpt_main(source, setup, calls):
    import ast as _ast
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    for entry, _, _, _ in calls:
        if not callable(namespace.get(entry)):
            return _rlpt_chunks({"phase": "entry", "error": "no function %%r defined" %% entry, "error_type": "NameError"})
    if setup:
        try:
            exec(compile(setup, "<test setup>", "exec"), namespace)
        except BaseException as e:
            return _rlpt_chunks({"phase": "setup", "error": "the test setup code raised " + _rlpt_last(e), "error_type": type(e).__name__})
    results = []
    for entry, args, kwargs, wraps in calls:
        fn = namespace[entry]
        try:
            value = fn(*[_rlpt_argument(a, namespace) for a in args], **{k: _rlpt_argument(v, namespace) for k, v in kwargs})
            for name, extra, named in wraps:
                value = _rlpt_applied[name](value, *[_ast.literal_eval(a) for a in extra], **{k: _ast.literal_eval(v) for k, v in named})
            results.append({"ok": _rlpt_tag(value)})
        except BaseException as e:
            results.append({"error": _rlpt_last(e), "error_type": type(e).__name__})
    try:
        return _rlpt_chunks({"phase": "done", "results": results})
    except BaseException as e:
        return _rlpt_chunks({"phase": "encode", "error": _rlpt_last(e), "error_type": type(e).__name__})
'''

_CHECK_HARNESS = _ENCODER + r'''
def _rlpt_copy(v, depth=0):
    if depth > 64:
        raise TypeError("returned value nested too deeply")
    t = type(v)
    if v is None or t in (bool, int, float, complex, str, bytes):
        return v
    if t is list:
        return [_rlpt_copy(x, depth + 1) for x in v]
    if t is tuple:
        return tuple(_rlpt_copy(x, depth + 1) for x in v)
    if t is dict:
        return {_rlpt_copy(k, depth + 1): _rlpt_copy(x, depth + 1) for k, x in v.items()}
    if t is set:
        return {_rlpt_copy(x, depth + 1) for x in v}
    if t is frozenset:
        return frozenset(_rlpt_copy(x, depth + 1) for x in v)
    raise TypeError("candidate returned a %%s, not a plain builtin value" %% t.__name__)

def _rlpt_main(source, entry, prelude, test):
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    fn = namespace.get(entry)
    if not callable(fn):
        return _rlpt_chunks({"phase": "entry", "error": "no function %%r defined" %% entry, "error_type": "NameError"})
    def candidate(*args, **kwargs):
        return _rlpt_copy(fn(*args, **kwargs))
    checker = {"__name__": "__check__"}
    try:
        exec(compile(prelude, "<prelude>", "exec"), checker)
        checker[entry] = candidate  # as in HumanEval's harness, where the test sees the completed program
        exec(compile(test, "<test>", "exec"), checker)
        checker["check"](candidate)
    except BaseException as e:
        return _rlpt_chunks({"phase": "done", "passed": False, "error": _rlpt_last(e), "error_type": type(e).__name__, "line": _rlpt_line(e, "<test>")})
    return _rlpt_chunks({"phase": "done", "passed": True})
'''

_STDIO_HARNESS = _ENCODER + r'''
def _rlpt_main(source):
    import os as _os
    fd = _os.open("input.txt", _os.O_RDONLY)
    _os.dup2(fd, 0)
    _os.close(fd)
    fd = _os.open("output.txt", _os.O_WRONLY | _os.O_CREAT | _os.O_TRUNC, 0o600)
    _os.dup2(fd, 1)
    _os.close(fd)
    _sys.stdin = open(0, "r", closefd=False)
    _sys.stdout = open(1, "w", closefd=False)
    error = None
    try:
        code = compile(source, "<program>", "exec")
    except BaseException as e:
        return _rlpt_chunks({"phase": "compile", "error": _rlpt_last(e), "error_type": type(e).__name__})
    try:
        exec(code, {"__name__": "__main__"})
    except SystemExit as e:
        if e.code not in (None, 0):
            error = {"error": "exit status %%r" %% (e.code,), "error_type": "SystemExit"}
    except BaseException as e:
        error = {"error": _rlpt_last(e), "error_type": type(e).__name__}
    try:
        _sys.stdout.flush()
    except BaseException:
        pass
    with open("output.txt", "rb") as f:
        data = f.read(%(cap)d + 1)
    payload = {"phase": "done", "stdout": data[:%(cap)d].decode("utf-8", "replace"), "truncated": len(data) > %(cap)d}
    payload.update(error or {})
    return _rlpt_chunks(payload)
''' % {"cap": 1 << 20}


def _harness(template: str) -> str:
    return template.replace("%%", "%")


# ----------------------------------------------------------------------------- host side


class _Bad(Exception):
    pass


def _untag(value: Any) -> Any:
    """Host objects (exact builtin types) from tagged data; opaque values stay _Opaque."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is not dict or len(value) != 1:
        raise _Bad(f"malformed result {value!r:.80}")
    (tag, body), = value.items()
    if tag == "opaque":
        return _Opaque(str(body))
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [_untag(x) for x in body]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {_untag(k): _untag(v) for k, v in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "complex":
        return complex(*body)
    raise _Bad(f"unknown tag {tag!r}")


@dataclasses.dataclass(frozen=True)
class _Opaque:
    type_name: str

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def _same(got: Any, want: Any, rel_tol: float = FLOAT_RTOL, abs_tol: float = FLOAT_RTOL) -> bool:
    """Python's == on plain data decoded here (no candidate object is involved:
    `0 == False`, `1.0 == 1`, a returned Counter is a dict), and floats, also
    inside lists, tuples and dict values, within rel_tol/abs_tol (a sum taken in
    another order is still right)."""
    if got == want:
        return True
    if type(got) in (int, float) and type(want) in (int, float) and float in (type(got), type(want)):
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)
    if type(got) is type(want) and type(want) in (list, tuple):
        return len(got) == len(want) and all(_same(g, w, rel_tol, abs_tol) for g, w in zip(got, want))
    if type(got) is dict and type(want) is dict:
        return got.keys() == want.keys() and all(_same(got[k], want[k], rel_tol, abs_tol) for k in want)
    return False


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _cut(text: str) -> str:
    return text if len(text) <= FEEDBACK_CHARS else text[: FEEDBACK_CHARS - 3] + "..."


def _payload(result: sandbox.JobResult, timeout_s: float) -> dict[str, Any] | Grade:
    grade = _process_failure(result, timeout_s)
    if grade is not None:
        return grade
    outer = result.result or {}
    if outer.get("phase") != "done":  # the harness itself failed to load: not expected
        return _error_grade(outer.get("error_type", ""), outer.get("error", "program failed"))
    try:
        (chunks,) = [r["ok"] for r in outer.get("results", [])]
        payload = json.loads("".join(chunks))
    except (KeyError, TypeError, ValueError):
        return Grade(Verdict.ERROR, 0.0, "program did not return results")
    if not isinstance(payload, dict):
        return Grade(Verdict.ERROR, 0.0, "program did not return results")
    if payload.get("phase") != "done":
        return _error_grade(str(payload.get("error_type", "")), str(payload.get("error", "program failed")))
    return payload


def _job(source: str, call: tuple[Any, ...], tests: ProgramTests, files: dict[str, str] | None = None) -> sandbox.PythonJob:
    return sandbox.PythonJob(source=source, entry="_rlpt_main", calls=(call,), timeout_s=tests.timeout_s, limits=tests.limits, files=files or {}, output_limit=256)


def _wire(function: str, args: Sequence[str], kwargs: Sequence[tuple[str, str]], wrap: Sequence[Wrap] = ()) -> list[Any]:
    """One call as the calls harness reads it: [function, args, kwargs, wrappers]."""
    return [function, list(args), [list(kv) for kv in kwargs], [[n, list(e), [list(kv) for kv in k]] for n, e, k in wrap]]


def _grade_checks(answer: str, tests: ProgramTests) -> Grade:
    calls = [_wire(c.function, c.args, c.kwargs, c.wrap) for c in tests.checks]
    job = _job(_harness(_CALLS_HARNESS), (answer, tests.setup, calls), tests)
    payload = _payload(sandbox.run(job), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(tests.checks):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    for check, out in zip(tests.checks, outputs):
        if not isinstance(out, dict):
            return Grade(Verdict.ERROR, 0.0, "program returned malformed results")
        shown = check.applied
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, _cut(f"{shown}: memory limit exceeded"))
            return Grade(Verdict.ERROR, 0.0, _cut(f"test `{check.source}` failed: {shown} raised {out['error']}"))
        try:
            got = _untag(out.get("ok"))
        except (_Bad, TypeError, ValueError, RecursionError) as e:
            return Grade(Verdict.ERROR, 0.0, f"{shown} returned a malformed value ({e})")
        if isinstance(got, _Opaque) or _has_opaque(got):
            return failed(_cut(f"test `{check.source}` failed: {shown} returned {_shown(got)}, not plain data"))
        if check.kind == "eq":
            ok = _same(got, check.expected)
        elif check.kind == "is":
            ok = got is check.expected
        elif check.kind == "close":
            ok = type(got) in (bool, int, float) and math.isclose(got, check.expected, rel_tol=check.rel_tol, abs_tol=check.abs_tol)
        else:  # bool() was applied in the sandbox
            ok = got is (check.kind == "truthy")
        if not ok:
            if check.kind in ("truthy", "falsy"):
                return failed(_cut(f"test `{check.source}` failed: {shown} returned a {'false' if check.kind == 'truthy' else 'true'} value"))
            want = _shown(check.expected) if check.kind in ("eq", "is") else f"{check.expected!r} (within tolerance)"
            return failed(_cut(f"test `{check.source}` failed: {shown} returned {_shown(got)}, expected {want}"))
    return passed(f"all {len(tests.checks)} tests passed")


def _has_opaque(value: Any) -> bool:
    if isinstance(value, _Opaque):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_opaque(x) for x in value)
    if isinstance(value, dict):
        return any(_has_opaque(k) or _has_opaque(v) for k, v in value.items())
    return False


def _grade_check_function(answer: str, tests: ProgramTests) -> Grade:
    job = _job(_harness(_CHECK_HARNESS), (answer, tests.entry, tests.prelude, tests.check_source), tests)
    payload = _payload(sandbox.run(job), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    if payload.get("passed") is True:
        return passed("check() passed")
    line = payload.get("line")
    lines = tests.check_source.splitlines()
    where = f" at `{lines[line - 1].strip()}`" if isinstance(line, int) and 0 < line <= len(lines) else ""
    error = str(payload.get("error", "check() failed"))
    if payload.get("error_type") == "MemoryError":
        return Grade(Verdict.OOM, 0.0, "memory limit exceeded")
    verdict = Verdict.FAIL if payload.get("error_type") == "AssertionError" else Verdict.ERROR
    return Grade(verdict, 0.0, _cut(f"check(candidate) failed{where}: {error}"))


class _Replay(Exception):
    """Ends a replayed check(): `grade` is the candidate's verdict."""

    def __init__(self, grade: Grade) -> None:
        super().__init__(grade.feedback)
        self.grade = grade


def _test_line(e: BaseException, source: str) -> str:
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test>":
            line = tb.tb_lineno
        tb = tb.tb_next
    lines = source.splitlines()
    return f" at `{lines[line - 1].strip()}`" if line is not None and 0 < line <= len(lines) else ""


def _grade_replay(answer: str, tests: ProgramTests) -> Grade:
    """check() runs here, on the host, over values the candidate computed in the
    sandbox for the calls recorded from the reference run: the candidate's
    process only ever returns plain data, as for decomposed asserts."""
    calls = [_wire(tests.entry, args, named) for args, named in tests.replay]
    payload = _payload(sandbox.run(_job(_harness(_CALLS_HARNESS), (answer, "", calls), tests)), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(calls):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    pending = list(zip(tests.replay, outputs))

    def replayed(*args, **kwargs):
        shown = f"{tests.entry}({', '.join([repr(a) for a in args] + [f'{k}={v!r}' for k, v in kwargs.items()])})"
        if not pending or _call_sources(args, kwargs) != pending[0][0]:
            raise _Replay(failed(_cut(f"check() called {_cut(shown)} after results that differ from the reference "
                                      f"solution's, so it cannot be graded from the recorded calls")))
        _, out = pending.pop(0)
        if not isinstance(out, dict):
            raise _Replay(Grade(Verdict.ERROR, 0.0, "program returned malformed results"))
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                raise _Replay(Grade(Verdict.OOM, 0.0, _cut(f"{shown}: memory limit exceeded")))
            raise _Replay(Grade(Verdict.ERROR, 0.0, _cut(f"{shown} raised {out['error']}")))
        try:
            got = _untag(out.get("ok"))
        except (_Bad, TypeError, ValueError, RecursionError) as e:
            raise _Replay(Grade(Verdict.ERROR, 0.0, f"{shown} returned a malformed value ({e})")) from None
        if _has_opaque(got):
            raise _Replay(failed(_cut(f"{shown} returned {_shown(got)}, not plain data")))
        return got

    try:
        _run_check(tests.check_source, tests.entry, tests.prelude, replayed)
    except _Replay as e:
        return e.grade
    except AssertionError as e:
        return failed(_cut(f"check(candidate) failed{_test_line(e, tests.check_source)}"))
    except Exception as e:  # check() itself choked on a returned value (e.g. len(None))
        return Grade(Verdict.ERROR, 0.0, _cut(f"check(candidate) failed{_test_line(e, tests.check_source)}: {type(e).__name__}: {e}"))
    if pending:
        return failed("check() made fewer calls than with the reference solution: its results steered it elsewhere")
    return passed(f"check() passed ({len(calls)} calls)")


def _normal_output(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _grade_stdio(answer: str, tests: ProgramTests) -> Grade:
    for index, (given, want) in enumerate(tests.io_pairs, 1):
        job = _job(_harness(_STDIO_HARNESS), (answer,), tests, files={"input.txt": given})
        payload = _payload(sandbox.run(job), tests.timeout_s)
        if isinstance(payload, Grade):
            return Grade(payload.verdict, 0.0, _cut(f"test {index} (input {given!r:.80}): {payload.feedback}"))
        if "error" in payload:
            if payload.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, f"test {index}: memory limit exceeded")
            return Grade(Verdict.ERROR, 0.0, _cut(f"test {index} (input {given!r:.80}): {payload['error']}"))
        got = str(payload.get("stdout", ""))
        if _normal_output(got) != _normal_output(want):
            return failed(_cut(f"test {index} failed: input {given!r:.100}, expected output {want!r:.100}, got {got!r:.100}"))
    return passed(f"all {len(tests.io_pairs)} tests passed")


def grade_program(answer: str, tests: ProgramTests) -> Grade:
    """Grades the program `answer` (full source text) against `tests`. Thread-safe."""
    if tests.form == "asserts":
        return _grade_checks(answer, tests)
    if tests.form == "replay":
        return _grade_replay(answer, tests)
    if tests.form == "check":
        return _grade_check_function(answer, tests)
    if tests.form == "stdio":
        return _grade_stdio(answer, tests)
    raise ValueError(f"unknown test form {tests.form!r}")
