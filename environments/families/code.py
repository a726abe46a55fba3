"""Program induction: infer an integer function from examples, write its body.

Prompt: "f(1)=5 f(2)=7 f(4)=11\\ndef f(x): return "; answer: "2*x+3".

The instruct style asks the same in words ("Find the integer function f
with f(1)=5, f(2)=7, f(4)=11. Reply with the Python function `def f(x): ...`
in one ```python fenced block."); its demonstration is that block. Either
style's answer is the last fenced block (else the whole reply): an expression
in x, run as `def f(x): return (<answer>)`, or a program that defines f.

Each domain enumerates a finite hypothesis class (e.g. all a*x+b with small
coefficients), deduplicated by behaviour on the hidden test inputs. Shown
examples are redrawn until exactly one hypothesis fits them, so every prompt
has a unique correct behaviour. Answers run in the sandbox as
`def f(x): return (<answer>)` against hidden inputs; the host compares the
returned values with expected values the candidate never sees.
"""

from __future__ import annotations

import ast
from typing import Callable

import numpy as np

from environments import answers, registry, sandbox
from environments.grading import grade_calls
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, malformed

HEADER = "def f(x): return "
MAX_PROMPT_CHARS = 64
MAX_ANSWER_CHARS = 48
INSTRUCT_PROMPT_CHARS = 320
INSTRUCT_ANSWER_CHARS = 2048
FENCE = answers.Fenced("python", "the Python function `def f(x): ...`")
TIMEOUT_S = 1.0
# Hidden test inputs: negatives, zero, and values far outside the shown range,
# so memorising the examples (or a lookup table) does not pass.
HIDDEN_XS = (-9, -4, -1, 0, 1, 2, 3, 4, 5, 6, 7, 11, 17, 30, 101)
_SHOWN_DRAWS = 200


def _signed(coef: int, term: str, first: bool) -> str:
    """Renders coef*term as it would appear inside a sum ("+3*x", "-x", "x")."""
    if coef == 0:
        return ""
    mag = abs(coef)
    body = term if (mag == 1 and term) else (f"{mag}*{term}" if term else str(mag))
    sign = "-" if coef < 0 else ("" if first else "+")
    return sign + body


def _poly(*terms: tuple[int, str]) -> str:
    out = ""
    for coef, term in terms:
        out += _signed(coef, term, first=not out)
    return out or "0"


Hypothesis = tuple[str, Callable[[int], int]]


def _linear() -> list[Hypothesis]:
    return [
        (_poly((a, "x"), (b, "")), lambda x, a=a, b=b: a * x + b)
        for a in range(-5, 10)
        if a != 0
        for b in range(-9, 10)
    ]


def _quadratic() -> list[Hypothesis]:
    return [
        (_poly((a, "x*x"), (b, "x"), (c, "")), lambda x, a=a, b=b, c=c: a * x * x + b * x + c)
        for a in (-2, -1, 1, 2, 3)
        for b in range(-5, 6)
        for c in range(-9, 10)
    ]


def _modulo() -> list[Hypothesis]:
    return [
        (f"x%{m}" + (_signed(c, "", first=False)), lambda x, m=m, c=c: x % m + c)
        for m in range(2, 10)
        for c in range(-9, 10)
    ]


def _absolute() -> list[Hypothesis]:
    return [(f"abs({_poly((a, 'x'), (b, ''))})", lambda x, a=a, b=b: abs(a * x + b)) for a in range(1, 6) for b in range(-9, 10)]


def _floordiv() -> list[Hypothesis]:
    return [(f"x//{k}" + _signed(c, "", first=False), lambda x, k=k, c=c: x // k + c) for k in range(2, 6) for c in range(-9, 10)]


def _cubic() -> list[Hypothesis]:
    return [(_poly((1, "x*x*x"), (b, "x"), (c, "")), lambda x, b=b, c=c: x**3 + b * x + c) for b in range(-3, 4) for c in range(-9, 10)]


def _clamp() -> list[Hypothesis]:
    return [(f"max(x,{c})", lambda x, c=c: max(x, c)) for c in range(-5, 10)] + [
        (f"min(x,{c})", lambda x, c=c: min(x, c)) for c in range(-5, 10)
    ]


class InductionDomain(Domain):
    """Infer f from `n_shown` examples with x drawn from `shown_xs`."""

    answer_format = "a Python expression in x, such as 2*x+3, or the function def f(x): ..."

    def __init__(self, spec: DomainSpec, hypotheses: list[Hypothesis], shown_xs: range, n_shown: int) -> None:
        self.spec = spec
        self._xs = np.asarray(sorted(set(HIDDEN_XS) | set(shown_xs)))
        self._col = {int(x): i for i, x in enumerate(self._xs)}
        table, seen, kept = [], set(), []
        for expr, fn in hypotheses:
            row = tuple(fn(int(x)) for x in self._xs)
            if row not in seen:  # behaviourally equal hypotheses are one task
                seen.add(row)
                table.append(row)
                kept.append(expr)
        self._exprs = kept
        self._table = np.asarray(table, dtype=np.int64)
        self._shown_xs = np.asarray(shown_xs)
        self._n_shown = n_shown

    def sample(self, rng: np.random.Generator) -> Problem:
        h = int(rng.integers(0, len(self._exprs)))
        for _ in range(_SHOWN_DRAWS):
            xs = np.sort(rng.choice(self._shown_xs, size=self._n_shown, replace=False))
            cols = [self._col[int(x)] for x in xs]
            fits = np.all(self._table[:, cols] == self._table[h, cols], axis=1)
            if int(fits.sum()) == 1:
                break
        else:
            raise RuntimeError(f"{self.spec.id}: no identifying examples for {self._exprs[h]!r}")
        values = self._table[h]
        shown = " ".join(f"f({int(x)})={int(values[self._col[int(x)]])}" for x in xs)
        expected = [int(values[self._col[x]]) for x in HIDDEN_XS]
        words = ", ".join(shown.split(" "))
        instruct = Instruct(prompt=f"Find the integer function f with {words}. {FENCE.instruction()}",
                            demonstration=FENCE.demonstrate(f"def f(x):\n    return {self._exprs[h]}"))
        return Problem(
            key=f"code:f(x)={self._exprs[h]}",
            prompt=f"{shown}\n{HEADER}",
            demonstration=self._exprs[h],
            hidden=expected,
            retry_cue=HEADER,
            instruct=instruct,
        )

    def grade(self, task: Problem, answer: str) -> Grade:
        found = answers.final_block(answer)
        many = answers.several(found)
        if many:
            return malformed(answers.several_feedback(many, "fenced blocks"))
        source = program(found.text)
        if isinstance(source, Grade):
            return source
        calls = tuple((x,) for x in HIDDEN_XS)
        job = sandbox.PythonJob(source=source, entry="f", calls=calls, timeout_s=TIMEOUT_S)
        return grade_calls(sandbox.run(job), calls, task.hidden, entry="f", timeout_s=TIMEOUT_S)


def _defines_f(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body)


def program(answer: str) -> str | Grade:
    """The program run for `answer`: one that defines f (`def f(...)`) as it is, an
    expression in x as `def f(x): return (<answer>)`; else the MALFORMED grade.
    Parsing bounded text is cheap and runs nothing; an expression's parse
    rejects statements (and newline tricks) before anything is executed."""
    try:
        tree = ast.parse(answer)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if tree is not None and _defines_f(tree):
        return answer + "\n"
    try:
        ast.parse(answer, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return malformed(f"expected {InductionDomain.answer_format}; {type(e).__name__}: {getattr(e, 'msg', e)}")
    return f"def f(x):\n    return ({answer})\n"


_VARIANTS = {
    "linear": ("easy", _linear, range(0, 7), 3),
    "quadratic": ("medium", _quadratic, range(0, 6), 3),
    "modulo": ("medium", _modulo, range(0, 31), 3),
    "abs": ("hard", _absolute, range(-6, 7), 3),
    "floordiv": ("medium", _floordiv, range(0, 25), 3),
    "cubic": ("hard", _cubic, range(-3, 4), 3),
    "clamp": ("hard", _clamp, range(-6, 10), 3),
}


def _register() -> None:
    for variant, (difficulty, hypotheses, shown_xs, n_shown) in _VARIANTS.items():
        spec = DomainSpec(
            id=f"rlpt/code-{variant}-{difficulty}-v0",
            family="code",
            difficulty=difficulty,
            tags=("code", "python", "sandbox", "short", variant),
            max_prompt_chars=MAX_PROMPT_CHARS,
            max_answer_chars=MAX_ANSWER_CHARS,
            description=f"write the body of a {variant} integer function f(x) from 3 examples",
            max_instruct_prompt_chars=INSTRUCT_PROMPT_CHARS,
            max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS,
        )
        registry.register(InductionDomain(spec, hypotheses(), shown_xs, n_shown))


_register()
