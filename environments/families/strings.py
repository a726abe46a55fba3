"""String manipulation on lowercase words: "rev abcd=" -> "dcba".

Words are random letters, not dictionary words, so the task space is large
enough for disjoint splits. Word length sets the difficulty.
"""

from __future__ import annotations

import string
from typing import Callable

import numpy as np

from environments import registry
from environments.families.exact import AnswerKind, ExactAnswerDomain

MAX_PROMPT_CHARS = 48
MAX_ANSWER_CHARS = 16
# Inclusive word-length range per difficulty; hard words still fit answers <= 16.
_LENGTHS = {"easy": (3, 6), "medium": (7, 10), "hard": (11, 14)}
_LETTERS = string.ascii_lowercase


def _word(rng: np.random.Generator, lo: int, hi: int, alphabet: str = _LETTERS) -> str:
    n = int(rng.integers(lo, hi + 1))
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=n))


def _unary(name: str, fn: Callable[[str], str], kind: AnswerKind, case: str = "lower"):
    """Variant applying `fn` to a random word whose case is "lower", "upper" or "mixed"."""

    def make(lo: int, hi: int):
        def gen(rng: np.random.Generator) -> tuple[str, str]:
            w = _word(rng, lo, hi)
            if case == "upper":
                w = w.upper()
            elif case == "mixed":
                flips = rng.random(len(w)) < 0.5
                w = "".join(c.upper() if f else c for c, f in zip(w, flips))
            return f"{name} {w}=", fn(w)

        return gen

    return make, kind


def _count(lo: int, hi: int):
    # A small alphabet makes repeated letters (counts > 1) common; the queried
    # letter comes from the word 3/4 of the time so most answers are non-zero.
    def gen(rng: np.random.Generator) -> tuple[str, str]:
        w = _word(rng, lo, hi, alphabet="abcdeno")
        letter = w[int(rng.integers(0, len(w)))] if rng.random() < 0.75 else _LETTERS[int(rng.integers(0, 26))]
        return f"count {letter} in {w}=", str(w.count(letter))

    return gen


def _palindrome(lo: int, hi: int):
    # Half the prompts are palindromes by construction; a random word almost never is.
    def gen(rng: np.random.Generator) -> tuple[str, str]:
        w = _word(rng, lo, hi)
        if rng.random() < 0.5:
            half = w[: (len(w) + 1) // 2]
            w = half + half[: len(w) // 2][::-1]
        return f"pal {w}=", "yes" if w == w[::-1] else "no"

    return gen


def _rot1(w: str) -> str:
    return "".join(_LETTERS[(_LETTERS.index(c) + 1) % 26] for c in w)


def _dedup(w: str) -> str:
    return "".join(dict.fromkeys(w))


_UNARY = {
    "reverse": _unary("rev", lambda w: w[::-1], AnswerKind.LETTERS),
    "upper": _unary("up", str.upper, AnswerKind.LETTERS),
    "lower": _unary("low", str.lower, AnswerKind.LETTERS, case="upper"),
    "sort": _unary("sort", lambda w: "".join(sorted(w)), AnswerKind.LETTERS),
    "length": _unary("len", lambda w: str(len(w)), AnswerKind.INT),
    "first": _unary("first", lambda w: w[0], AnswerKind.LETTERS),
    "last": _unary("last", lambda w: w[-1], AnswerKind.LETTERS),
    "rot1": _unary("rot1", _rot1, AnswerKind.LETTERS),
    "dedup": _unary("dedup", _dedup, AnswerKind.LETTERS),
    "vowels": _unary("vowels", lambda w: str(sum(c in "aeiou" for c in w)), AnswerKind.INT),
    "double": _unary("dbl", lambda w: "".join(c + c for c in w[:8]), AnswerKind.LETTERS),
    "novowels": _unary("novow", lambda w: "".join(c for c in w if c not in "aeiou") or "none", AnswerKind.LETTERS),
    "capitalize": _unary("cap", str.capitalize, AnswerKind.LETTERS),
    "odd": _unary("odd", lambda w: w[::2], AnswerKind.LETTERS),
    "revup": _unary("revup", lambda w: w[::-1].upper(), AnswerKind.LETTERS),
    "swapcase": _unary("swap", str.swapcase, AnswerKind.LETTERS, case="mixed"),
}


def _register() -> None:
    variants: dict[str, tuple[Callable, AnswerKind]] = dict(_UNARY)
    variants["count"] = (_count, AnswerKind.INT)
    variants["palindrome"] = (_palindrome, AnswerKind.LETTERS)
    for variant, (make, kind) in variants.items():
        for difficulty, (lo, hi) in _LENGTHS.items():
            spec = registry.DomainSpec(
                id=f"rlpt/strings-{variant}-{difficulty}-v0",
                family="strings",
                difficulty=difficulty,
                tags=("strings", "exact-match", "short", variant),
                max_prompt_chars=MAX_PROMPT_CHARS,
                max_answer_chars=MAX_ANSWER_CHARS,
                description=f"{variant} of a random {lo}-{hi} letter word",
            )
            registry.register(ExactAnswerDomain(spec, make(lo, hi), kind))


_register()
