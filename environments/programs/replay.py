"""Replaying a task's check() on the host: the calls it makes of the trusted
reference solution, recorded as literals (``record_calls``), and check() run
here over the values a candidate computed in the sandbox for those calls
(``run_check``), with `import random` seeded the same for both."""

from __future__ import annotations

import ast
import builtins
import random
import types
from typing import Any


class _NoLiteral(Exception):
    pass


def literal_source(value: Any) -> str | None:
    """repr(value) when it reads back (ast.literal_eval) as the same value of the
    same types (its repr again), else None (nan, objects, recursive values)."""
    try:
        text = repr(value)
        return text if repr(ast.literal_eval(text)) == text else None
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def call_sources(args: tuple, kwargs: dict) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    sources = tuple(literal_source(a) for a in args)
    named = tuple((k, literal_source(v)) for k, v in kwargs.items())
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


def run_check(test: str, entry: str, prelude: str, candidate: Any) -> None:
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


def record_calls(test: str, entry: str, prelude: str, reference: str):
    """The calls check() makes of its candidate when that is the trusted
    `reference`, as literal sources; None when an argument has no literal form."""
    namespace: dict[str, Any] = {"__name__": "__reference__"}
    exec(compile(reference, "<reference>", "exec"), namespace)
    solution = namespace[entry]
    calls = []

    def recorder(*args, **kwargs):
        sources = call_sources(args, kwargs)  # before the call, which may mutate them
        if sources is None:
            raise _NoLiteral
        calls.append(sources)
        return solution(*args, **kwargs)

    try:
        run_check(test, entry, prelude, recorder)
    except _NoLiteral:
        return None
    except Exception as e:
        raise ValueError(f"the reference solution of {entry!r} fails its own check(): {type(e).__name__}: {e}") from e
    return tuple(calls)
