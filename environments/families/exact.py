"""Domains whose answer is a single canonical string (arithmetic, string ops).

The generator returns (prompt, canonical answer); the prompt doubles as the
task's canonical key, so the split is decided by what the model actually sees.
"""

from __future__ import annotations

import enum
import re
from typing import Callable

import numpy as np

from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Problem, failed, malformed, passed

_INT_RE = re.compile(r"^[+-]?[0-9]{1,64}$")  # ASCII only: int() would accept other scripts
_LETTERS_RE = re.compile(r"^[A-Za-z]+$")


class AnswerKind(enum.Enum):
    """How an answer is parsed before comparison with the reference."""

    INT = "an integer such as 42 or -7"
    LETTERS = "letters only, such as abc"


class ExactAnswerDomain(Domain):
    """Exact-match domain: PASS iff the parsed answer equals the reference."""

    def __init__(
        self,
        spec: DomainSpec,
        generate: Callable[[np.random.Generator], tuple[str, str]],
        kind: AnswerKind,
    ) -> None:
        self.spec = spec
        self._generate = generate
        self._kind = kind
        self.answer_format = kind.value

    def sample(self, rng: np.random.Generator) -> Problem:
        prompt, answer = self._generate(rng)
        return Problem(key=prompt, prompt=prompt, demonstration=answer, hidden=answer)

    def grade(self, task: Problem, answer: str) -> Grade:
        if self._kind is AnswerKind.INT:
            if not _INT_RE.match(answer):
                return malformed(f"expected {self._kind.value}, got {answer[:20]!r}")
            ok = int(answer) == int(task.hidden)
        else:
            if not _LETTERS_RE.match(answer):
                return malformed(f"expected {self._kind.value}, got {answer[:20]!r}")
            ok = answer == task.hidden
        return passed() if ok else failed("wrong answer")
