"""Grading whole programs: the model writes a function or a program, a task's tests run it.

    from environments.programs import assert_tests, grade_program
    tests = assert_tests(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    grade_program("def add(a, b):\\n    return a + b", tests)   # Grade(PASS, 1.0, ...)

Three forms of tests, and what each guarantees:

* `assert_tests` (MBPP style: `assert f(1, 2) == 3`, `assert y == f(x)`,
  `assert f(x)`, `assert not f(x)`, `assert math.isclose(f(x), y)`,
  `assert abs(f(x) - y) < tol`). Each assert is decomposed on the host, at
  load time: the call (a plain function name with literal arguments) runs in
  the sandbox, the expected value (a literal) never leaves the host, and the
  returned value comes back as plain tagged data (exact builtin types only)
  that the host compares type-exactly. A rigged `__eq__`, patched asserts or
  builtins, `sys.exit(0)`, printing "PASS" or reading the caller's frames
  earn nothing: the candidate must produce the expected value itself. An
  assert that does not decompose is refused with ValueError naming it.
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


@dataclasses.dataclass(frozen=True)
class Check:
    """One decomposed assert: `call` runs in the sandbox, the rest stays on the host.

    kind: "eq" (== expected), "close" (within rel_tol/abs_tol of expected),
      "truthy", "falsy".
    source: the assert as written (named in errors and feedback).
    """

    function: str
    args: tuple[str, ...]  # literal source of each positional argument
    kwargs: tuple[tuple[str, str], ...]
    kind: str
    expected: Any = None
    rel_tol: float = 0.0
    abs_tol: float = 0.0
    source: str = ""
    wrap: str = ""  # a conversion from _WRAPPERS applied (on the host) to the result, or ""

    @property
    def call(self) -> str:
        parts = list(self.args) + [f"{k}={v}" for k, v in self.kwargs]
        return f"{self.function}({', '.join(parts)})"


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
    io_pairs: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    limits: sandbox.Limits = sandbox.Limits()


# ----------------------------------------------------------------------------- loading


# Conversions a test may apply to a call's result (`tuple(f(x)) == ...`): they
# run on the host, on the decoded plain value.
_WRAPPERS = {"tuple": tuple, "list": list, "sorted": sorted, "set": set, "frozenset": frozenset}
_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
          ast.Pow: lambda a, b: a**b}


def _constant(node: ast.AST) -> Any:
    """A literal, or constant arithmetic on literals (`3 * 19`, `2.0 / 3.0`, `'ab' + 'c'`),
    or tuple/list/set/sorted of one; ValueError otherwise. Bounded: no huge powers or strings."""
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
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS and len(node.args) == 1 and not node.keywords:
        return _WRAPPERS[node.func.id](_constant(node.args[0]))
    raise ValueError("not a constant")


def _literal(node: ast.AST, what: str, source: str) -> Any:
    try:
        return _constant(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(f"cannot decompose test {source!r}: {what} {ast.unparse(node)!r} is not a literal") from None


def _call(node: ast.AST, target: str | None, source: str) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    """(function, args, kwargs) of a call on a plain name with literal arguments, or None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return None
    if target is not None and node.func.id != target:
        return None
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise ValueError(f"cannot decompose test {source!r}: starred argument")
        args.append(_source_of(_literal(arg, "argument", source), arg, source))
    kwargs = []
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"cannot decompose test {source!r}: **kwargs argument")
        kwargs.append((kw.arg, _source_of(_literal(kw.value, "argument", source), kw.value, source)))
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


def _target_call(node: ast.AST, target: str | None) -> tuple[str, ast.Call] | None:
    """("", call) for a call on the target, (wrapper, call) for `tuple(call)` etc., else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _WRAPPERS
            and len(node.args) == 1 and not node.keywords and _is_call(node.args[0], target)):
        return node.func.id, node.args[0]
    return ("", node) if _is_call(node, target) else None


def _number(node: ast.AST, source: str) -> float:
    value = _literal(node, "tolerance", source)
    if type(value) not in (int, float):
        raise ValueError(f"cannot decompose test {source!r}: tolerance {value!r} is not a number")
    return float(value)


def decompose(stmt: ast.Assert, target: str | None, source: str) -> Check:
    """The Check for one assert statement; ValueError (naming it) if it does not decompose.

    target: the only function name calls may use (e.g. "candidate"); None: any name.
    """
    test = stmt.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_call(test.operand, target):
        return Check(*_call(test.operand, target, source), kind="falsy", source=source)
    if _is_call(test, target):
        return Check(*_call(test, target, source), kind="truthy", source=source)
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "isclose" and isinstance(test.func.value, ast.Name) and test.func.value.id == "math":
        # math.isclose(f(x), y, rel_tol=..., abs_tol=...), either argument order
        if len(test.args) == 2:
            a, b = test.args
            call_node, want_node = (a, b) if _is_call(a, target) else (b, a)
            if _is_call(call_node, target) and not _is_call(want_node, target):
                tol = {"rel_tol": 1e-9, "abs_tol": 0.0}
                for kw in test.keywords:
                    if kw.arg not in tol:
                        raise ValueError(f"cannot decompose test {source!r}: math.isclose keyword {kw.arg!r}")
                    tol[kw.arg] = _number(kw.value, source)
                expected = _literal(want_node, "expected value", source)
                return Check(*_call(call_node, target, source), kind="close", expected=expected, source=source, **tol)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Eq, ast.Is)):
            for call_side, want_node in ((left, right), (right, left)):
                wrapped = _target_call(call_side, target)
                if wrapped is None:
                    continue
                try:
                    expected = _constant(want_node)
                except (ValueError, TypeError, MemoryError, RecursionError):
                    continue
                if isinstance(op, ast.Is) and not any(expected is v for v in (None, True, False)):
                    raise ValueError(f"cannot decompose test {source!r}: 'is' compares with {expected!r}")
                wrap, call_node = wrapped
                return Check(*_call(call_node, target, source), kind="eq", expected=expected, source=source, wrap=wrap)
        if isinstance(op, (ast.Lt, ast.LtE)) and isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "abs" and len(left.args) == 1:
            # abs(f(x) - y) < tol, abs(y - f(x)) <= tol
            inner = left.args[0]
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                a, b = inner.left, inner.right
                call_node, want_node = (a, b) if _is_call(a, target) else (b, a)
                if _is_call(call_node, target) and not _is_call(want_node, target):
                    expected = _literal(want_node, "expected value", source)
                    if type(expected) not in (int, float):
                        raise ValueError(f"cannot decompose test {source!r}: {expected!r} is not a number")
                    return Check(*_call(call_node, target, source), kind="close", expected=expected, abs_tol=_number(right, source), source=source)
    raise ValueError(
        f"cannot decompose test {source!r}: expected `assert f(<literals>) == <literal>` "
        "(or `assert f(...)`, `assert not f(...)`, math.isclose / abs(...) < tol)"
    )


def _parse(text: str, what: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise ValueError(f"{what} is not valid Python: {e.msg} (line {e.lineno})") from None


def assert_tests(asserts: Sequence[str], *, timeout_s: float = DEFAULT_TIMEOUT_S, limits: sandbox.Limits = sandbox.Limits()) -> ProgramTests:
    """MBPP-style tests: each string is one `assert f(...) == ...` statement.

    Raises ValueError naming the first assert that cannot be decomposed; such
    tests are never run in the candidate's process."""
    checks = []
    for text in asserts:
        module = _parse(text, f"test {text!r}")
        if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
            raise ValueError(f"test {text!r} must be exactly one assert statement")
        checks.append(decompose(module.body[0], None, text.strip()))
    if not checks:
        raise ValueError("a program task needs at least one test")
    return ProgramTests(form="asserts", entry=checks[0].function, checks=tuple(checks), timeout_s=timeout_s, limits=limits)


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
import json as _json, sys as _sys, traceback as _tb

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
    if t is dict:
        return {"dict": [[_rlpt_tag(k, depth + 1), _rlpt_tag(x, depth + 1)] for k, x in v.items()]}
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
''' % {"chunk": _CHUNK}

_CALLS_HARNESS = _ENCODER + r'''
def _rlpt_main(source, calls):
    import ast as _ast
    namespace, problem = _rlpt_load(source, "__candidate__")
    if problem is not None:
        return _rlpt_chunks(problem)
    for entry, _, _ in calls:
        if not callable(namespace.get(entry)):
            return _rlpt_chunks({"phase": "entry", "error": "no function %%r defined" %% entry, "error_type": "NameError"})
    results = []
    for entry, args, kwargs in calls:
        fn = namespace[entry]
        try:
            value = fn(*[_ast.literal_eval(a) for a in args], **{k: _ast.literal_eval(v) for k, v in kwargs})
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
    """Python's == on plain data, except that bool is not a number (True is not 1);
    int and float compare numerically (floats within rel_tol/abs_tol)."""
    numeric = (int, float)
    if type(want) in numeric and type(got) in numeric:
        if type(want) is int and type(got) is int:
            return got == want
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)
    if type(got) is not type(want):
        return False
    if type(want) in (list, tuple):
        return len(got) == len(want) and all(_same(g, w, rel_tol, abs_tol) for g, w in zip(got, want))
    if type(want) is dict:
        return got.keys() == want.keys() and all(_same(got[k], want[k], rel_tol, abs_tol) for k in want)
    return got == want


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


def _grade_checks(answer: str, tests: ProgramTests) -> Grade:
    calls = [[c.function, list(c.args), [list(kv) for kv in c.kwargs]] for c in tests.checks]
    job = _job(_harness(_CALLS_HARNESS), (answer, calls), tests)
    payload = _payload(sandbox.run(job), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(tests.checks):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    for check, out in zip(tests.checks, outputs):
        if not isinstance(out, dict):
            return Grade(Verdict.ERROR, 0.0, "program returned malformed results")
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, _cut(f"{check.call}: memory limit exceeded"))
            return Grade(Verdict.ERROR, 0.0, _cut(f"test `{check.source}` failed: {check.call} raised {out['error']}"))
        try:
            got = _untag(out.get("ok"))
        except (_Bad, TypeError, ValueError, RecursionError) as e:
            return Grade(Verdict.ERROR, 0.0, f"{check.call} returned a malformed value ({e})")
        if isinstance(got, _Opaque) or _has_opaque(got):
            return failed(_cut(f"test `{check.source}` failed: {check.call} returned {_shown(got)}, not plain data"))
        if check.wrap:
            try:
                got = _WRAPPERS[check.wrap](got)
            except (TypeError, ValueError) as e:
                return failed(_cut(f"test `{check.source}` failed: {check.wrap}() of {check.call}'s result {_shown(got)} raised {type(e).__name__}: {e}"))
        if check.kind == "eq":
            ok = _same(got, check.expected)
        elif check.kind == "close":
            ok = type(got) in (int, float) and math.isclose(got, check.expected, rel_tol=check.rel_tol, abs_tol=check.abs_tol)
        else:
            ok = bool(got) is (check.kind == "truthy")
        if not ok:
            want = {"eq": _shown(check.expected), "close": f"{check.expected!r} (within tolerance)", "truthy": "a true value", "falsy": "a false value"}[check.kind]
            return failed(_cut(f"test `{check.source}` failed: {check.call} returned {_shown(got)}, expected {want}"))
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
    calls = [[tests.entry, list(args), [list(kv) for kv in named]] for args, named in tests.replay]
    payload = _payload(sandbox.run(_job(_harness(_CALLS_HARNESS), (answer, calls), tests)), tests.timeout_s)
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
