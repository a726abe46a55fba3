"""The tests of a program task: `ProgramTests` (its form and data) and one
decomposed assert, `Check`; ``stdio_tests`` builds the stdin -> stdout form
(``environments.programs.asserts`` builds the others)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from environments import sandbox

FEEDBACK_CHARS = 400
DEFAULT_TIMEOUT_S = 5.0


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


def stdio_tests(pairs: Sequence[tuple[str, str]], *, timeout_s: float = 2.0, limits: sandbox.Limits = sandbox.Limits()) -> ProgramTests:
    """Competitive-programming tests: (stdin, expected stdout) pairs."""
    pairs = tuple((str(i), str(o)) for i, o in pairs)
    if not pairs:
        raise ValueError("a program task needs at least one test")
    return ProgramTests(form="stdio", io_pairs=pairs, timeout_s=timeout_s, limits=limits)
