"""Integer arithmetic: "47+38=" -> "85".

Bare prompts are fixed, regular formats ending in "=" so a ~1M-parameter
byte-level model can learn them from demonstrations; the instruct style asks
the same in words ("What is 47 + 38? Put your final answer on a last line of
the form `Answer: <integer>`."). Operand ranges set the difficulty.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from environments import registry
from environments.families.exact import (INSTRUCT_ANSWER_CHARS, INSTRUCT_PROMPT_CHARS, AnswerKind, Exact,
                                         ExactAnswerDomain)

Gen = Callable[[np.random.Generator], Exact]
MAX_PROMPT_CHARS = 48
MAX_ANSWER_CHARS = 16


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi] (inclusive)."""
    return int(rng.integers(lo, hi + 1))


def _exact(prompt: str, value: int, phrase: str, note: str = "") -> Exact:
    """The task "<prompt>" -> value, asked in words as "What is <phrase>?<note>"."""
    work = f"{phrase[0].upper()}{phrase[1:]} is {value}."
    return Exact(prompt, str(value), f"What is {phrase}?{note}", work)


# How the instruct prompt says each operator symbol.
_WORDS = {"+": "{a} + {b}", "-": "{a} - {b}", "*": "{a} * {b}", "%": "the remainder of {a} divided by {b}",
          "^": "{a} to the power {b}"}


def _binary(sym: str, fn: Callable[[int, int], int], a_hi: int, b_hi: int, b_lo: int = 0) -> Gen:
    def gen(rng: np.random.Generator) -> Exact:
        a, b = _int(rng, 0, a_hi), _int(rng, b_lo, b_hi)
        return _exact(f"{a}{sym}{b}=", fn(a, b), _WORDS[sym].format(a=a, b=b))

    return gen


def _exact_div(b_lo: int, b_hi: int, q_hi: int) -> Gen:
    # Dividend built as b*q so the answer is an exact integer.
    def gen(rng: np.random.Generator) -> Exact:
        b, q = _int(rng, b_lo, b_hi), _int(rng, 0, q_hi)
        return _exact(f"{b * q}/{b}=", q, f"{b * q} / {b}", " (It divides exactly.)")

    return gen


_CALLS = {"max": "the larger of {a} and {b}", "min": "the smaller of {a} and {b}",
          "gcd": "the greatest common divisor of {a} and {b}", "absdiff": "the absolute difference between {a} and {b}",
          "sq": "the square of {a}", "avg": "the average of {a} and {b}"}


def _call(name: str, fn: Callable[[int, int], int], hi: int, lo: int = 0) -> Gen:
    def gen(rng: np.random.Generator) -> Exact:
        a, b = _int(rng, lo, hi), _int(rng, lo, hi)
        return _exact(f"{name}({a},{b})=", fn(a, b), _CALLS[name].format(a=a, b=b))

    return gen


def _unary(name: str, fn: Callable[[int], int], hi: int) -> Gen:
    def gen(rng: np.random.Generator) -> Exact:
        a = _int(rng, 0, hi)
        return _exact(f"{name}({a})=", fn(a), _CALLS[name].format(a=a))

    return gen


def _avg(hi: int) -> Gen:
    # b has a's parity so the mean is an integer.
    def gen(rng: np.random.Generator) -> Exact:
        a = _int(rng, 0, hi)
        b = _int(rng, 0, hi // 2) * 2 + a % 2
        return _exact(f"avg({a},{b})=", (a + b) // 2, _CALLS["avg"].format(a=a, b=b))

    return gen


def _chain(hi: int) -> Gen:
    # "a+b*c=": tests operator precedence, not just digit-wise addition.
    def gen(rng: np.random.Generator) -> Exact:
        a, b, c = _int(rng, 0, hi), _int(rng, 0, hi), _int(rng, 0, 9)
        op1, op2 = ("+-"[_int(rng, 0, 1)], "*")
        value = a + b * c if op1 == "+" else a - b * c
        return _exact(f"{a}{op1}{b}{op2}{c}=", value, f"{a} {op1} {b} * {c}",
                      " (Multiplication comes before addition and subtraction.)")

    return gen


# variant -> difficulty -> generator
_TABLE: dict[str, dict[str, Gen]] = {
    "add": {
        "easy": _binary("+", lambda a, b: a + b, 99, 99),
        "medium": _binary("+", lambda a, b: a + b, 999, 999),
        "hard": _binary("+", lambda a, b: a + b, 99999, 99999),
    },
    "sub": {
        "easy": _binary("-", lambda a, b: a - b, 99, 99),
        "medium": _binary("-", lambda a, b: a - b, 999, 999),
        "hard": _binary("-", lambda a, b: a - b, 99999, 99999),
    },
    "mul": {
        "easy": _binary("*", lambda a, b: a * b, 9, 99),
        "medium": _binary("*", lambda a, b: a * b, 99, 99),
        "hard": _binary("*", lambda a, b: a * b, 999, 999),
    },
    "div": {
        "easy": _exact_div(1, 9, 9),
        "medium": _exact_div(2, 19, 99),
        "hard": _exact_div(2, 99, 999),
    },
    "mod": {
        "easy": _binary("%", lambda a, b: a % b, 99, 9, b_lo=2),
        "medium": _binary("%", lambda a, b: a % b, 999, 99, b_lo=2),
        "hard": _binary("%", lambda a, b: a % b, 99999, 999, b_lo=2),
    },
    "max": {
        "easy": _call("max", max, 99),
        "medium": _call("max", max, 9999),
        "hard": _call("max", max, 999999),
    },
    "min": {
        "easy": _call("min", min, 99),
        "medium": _call("min", min, 9999),
        "hard": _call("min", min, 999999),
    },
    "gcd": {
        "easy": _call("gcd", math.gcd, 30, lo=1),
        "medium": _call("gcd", math.gcd, 300, lo=1),
        "hard": _call("gcd", math.gcd, 3000, lo=1),
    },
    "pow": {
        "easy": _binary("^", lambda a, b: a**b, 30, 3),
        "medium": _binary("^", lambda a, b: a**b, 99, 3),
        "hard": _binary("^", lambda a, b: a**b, 999, 3),
    },
    "absdiff": {
        "easy": _call("absdiff", lambda a, b: abs(a - b), 99),
        "medium": _call("absdiff", lambda a, b: abs(a - b), 9999),
        "hard": _call("absdiff", lambda a, b: abs(a - b), 999999),
    },
    "square": {
        "easy": _unary("sq", lambda a: a * a, 99),
        "medium": _unary("sq", lambda a: a * a, 999),
        "hard": _unary("sq", lambda a: a * a, 9999),
    },
    "avg": {
        "easy": _avg(99),
        "medium": _avg(9999),
        "hard": _avg(999999),
    },
    "chain": {
        "easy": _chain(9),
        "medium": _chain(99),
        "hard": _chain(999),
    },
}


def _register() -> None:
    for variant, by_difficulty in _TABLE.items():
        for difficulty, gen in by_difficulty.items():
            spec = registry.DomainSpec(
                id=f"rlpt/math-{variant}-{difficulty}-v0",
                family="math",
                difficulty=difficulty,
                tags=("arithmetic", "exact-match", "short", variant),
                max_prompt_chars=MAX_PROMPT_CHARS,
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"integer {variant}; answer is the decimal result",
                max_instruct_prompt_chars=INSTRUCT_PROMPT_CHARS,
                max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS,
            )
            registry.register(ExactAnswerDomain(spec, gen, AnswerKind.INT))


_register()
