"""String manipulation on lowercase words: "rev abcd=" -> "dcba".

The instruct style asks the same in words ('Write the letters of "abcd" in
reverse order. Put your final answer on a last line of the form `Answer:
<letters>`.').

Words are random letters, not dictionary words, so the task space is large
enough for disjoint splits. Word length sets the difficulty.
"""

from __future__ import annotations

import string
from typing import Callable

import numpy as np

from environments import registry
from environments.families.exact import (INSTRUCT_ANSWER_CHARS, INSTRUCT_PROMPT_CHARS, AnswerKind, Exact,
                                         ExactAnswerDomain)

MAX_PROMPT_CHARS = 48
MAX_ANSWER_CHARS = 16
# Inclusive word-length range per difficulty; hard words still fit answers <= 16.
_LENGTHS = {"easy": (3, 6), "medium": (7, 10), "hard": (11, 14)}
_LETTERS = string.ascii_lowercase


def _word(rng: np.random.Generator, lo: int, hi: int, alphabet: str = _LETTERS) -> str:
    n = int(rng.integers(lo, hi + 1))
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=n))


def _unary(name: str, fn: Callable[[str], str], kind: AnswerKind, question: str, case: str = "lower"):
    """Variant applying `fn` to a random word whose case is "lower", "upper" or
    "mixed"; `question` asks it in words, with {w} the quoted word."""

    def make(lo: int, hi: int):
        def gen(rng: np.random.Generator) -> Exact:
            w = _word(rng, lo, hi)
            if case == "upper":
                w = w.upper()
            elif case == "mixed":
                flips = rng.random(len(w)) < 0.5
                w = "".join(c.upper() if f else c for c, f in zip(w, flips))
            return Exact(f"{name} {w}=", fn(w), question.format(w=f'"{w}"'))

        return gen

    return make, kind


def _count(lo: int, hi: int):
    # A small alphabet makes repeated letters (counts > 1) common; the queried
    # letter comes from the word 3/4 of the time so most answers are non-zero.
    def gen(rng: np.random.Generator) -> Exact:
        w = _word(rng, lo, hi, alphabet="abcdeno")
        letter = w[int(rng.integers(0, len(w)))] if rng.random() < 0.75 else _LETTERS[int(rng.integers(0, 26))]
        return Exact(f"count {letter} in {w}=", str(w.count(letter)),
                     f'How many times does the letter "{letter}" occur in "{w}"?')

    return gen


def _palindrome(lo: int, hi: int):
    # Half the prompts are palindromes by construction; a random word almost never is.
    def gen(rng: np.random.Generator) -> Exact:
        w = _word(rng, lo, hi)
        if rng.random() < 0.5:
            half = w[: (len(w) + 1) // 2]
            w = half + half[: len(w) // 2][::-1]
        return Exact(f"pal {w}=", "yes" if w == w[::-1] else "no",
                     f'Is "{w}" a palindrome (the same read backwards)?', what="<yes or no>")

    return gen


def _rot1(w: str) -> str:
    return "".join(_LETTERS[(_LETTERS.index(c) + 1) % 26] for c in w)


def _dedup(w: str) -> str:
    return "".join(dict.fromkeys(w))


_VOWELS = "the vowels (a, e, i, o, u)"
_UNARY = {
    "reverse": _unary("rev", lambda w: w[::-1], AnswerKind.LETTERS, "Write the letters of {w} in reverse order."),
    "upper": _unary("up", str.upper, AnswerKind.LETTERS, "Write {w} in upper case."),
    "lower": _unary("low", str.lower, AnswerKind.LETTERS, "Write {w} in lower case.", case="upper"),
    "sort": _unary("sort", lambda w: "".join(sorted(w)), AnswerKind.LETTERS,
                   "Sort the letters of {w} in alphabetical order."),
    "length": _unary("len", lambda w: str(len(w)), AnswerKind.INT, "How many letters does {w} have?"),
    "first": _unary("first", lambda w: w[0], AnswerKind.LETTERS, "What is the first letter of {w}?"),
    "last": _unary("last", lambda w: w[-1], AnswerKind.LETTERS, "What is the last letter of {w}?"),
    "rot1": _unary("rot1", _rot1, AnswerKind.LETTERS,
                   "Replace each letter of {w} by the next letter of the alphabet (z becomes a)."),
    "dedup": _unary("dedup", _dedup, AnswerKind.LETTERS,
                    "Remove the repeated letters of {w}, keeping the first occurrence of each letter."),
    "vowels": _unary("vowels", lambda w: str(sum(c in "aeiou" for c in w)), AnswerKind.INT,
                     f"How many of the letters of {{w}} are {_VOWELS}?"),
    "double": _unary("dbl", lambda w: "".join(c + c for c in w[:8]), AnswerKind.LETTERS,
                     "Take the first 8 letters of {w} (all of them if it is shorter) and write each twice."),
    "novowels": _unary("novow", lambda w: "".join(c for c in w if c not in "aeiou") or "none", AnswerKind.LETTERS,
                       f"Remove {_VOWELS} from {{w}}; if no letter is left, answer none."),
    "capitalize": _unary("cap", str.capitalize, AnswerKind.LETTERS,
                         "Capitalize {w}: its first letter in upper case, the others in lower case."),
    "odd": _unary("odd", lambda w: w[::2], AnswerKind.LETTERS, "Keep the 1st, 3rd, 5th, ... letters of {w}."),
    "revup": _unary("revup", lambda w: w[::-1].upper(), AnswerKind.LETTERS,
                    "Write the letters of {w} in reverse order, in upper case."),
    "swapcase": _unary("swap", str.swapcase, AnswerKind.LETTERS,
                       "Swap the case of every letter of {w} (upper to lower, lower to upper).", case="mixed"),
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
                max_instruct_prompt_chars=INSTRUCT_PROMPT_CHARS,
                max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS,
            )
            registry.register(ExactAnswerDomain(spec, make(lo, hi), kind))


_register()
