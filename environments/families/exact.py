"""Domains whose answer is a single canonical string (arithmetic, string ops).

The generator returns an `Exact`: the bare prompt, which doubles as the task's
canonical key (so the split is decided by what the tiny base sees), the
canonical answer, and the same task in words for the instruct prompt style
(with a brief working line for its demonstration). Both styles are graded
the same way: the final answer is read where instruct models put it
(`environments.answers`: the last `Answer:` line, `####`, a box), a bare
answer is its own final answer, and a reply offering several answers
("Answer: 3 or 4", two different answer lines) is MALFORMED.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Callable

import numpy as np

from environments import answers
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, failed, malformed, passed

# ASCII only (int() would accept other scripts); thousands separators as instruct models write them.
_INT_RE = re.compile(r"^[+-]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,64})$")
_LETTERS_RE = re.compile(r"^[A-Za-z]+$")
# The instruct style's bounds for every exact-match domain: a question of at most
# ~150 characters plus its answer format; a reply with its reasoning.
INSTRUCT_PROMPT_CHARS = 320
INSTRUCT_ANSWER_CHARS = 2048


class AnswerKind(enum.Enum):
    """How an answer is parsed before comparison with the reference."""

    INT = "an integer such as 42 or -7"
    LETTERS = "letters only, such as abc"


_LINES = {AnswerKind.INT: answers.AnswerLine("<integer>"), AnswerKind.LETTERS: answers.AnswerLine("<letters>")}


@dataclasses.dataclass(frozen=True)
class Exact:
    """One exact-match task. prompt: the bare prompt ("47+38="), also the key;
    answer: the canonical answer; question: the task in words ("What is 47 +
    38?"); work: a brief working line for the instruct demonstration ("47 + 38
    = 85."), "" for none; what: how the answer line names the answer, where
    not the kind's ("<yes or no>")."""

    prompt: str
    answer: str
    question: str
    work: str = ""
    what: str = ""


def _int_key(text: str) -> int | None:
    return int(text.replace(",", "")) if _INT_RE.match(text) else None


class ExactAnswerDomain(Domain):
    """Exact-match domain: PASS iff the parsed final answer equals the reference."""

    def __init__(self, spec: DomainSpec, generate: Callable[[np.random.Generator], Exact], kind: AnswerKind) -> None:
        self.spec = spec
        self._generate = generate
        self._kind = kind
        self.answer_format = kind.value

    def sample(self, rng: np.random.Generator) -> Problem:
        task = self._generate(rng)
        line = answers.AnswerLine(task.what) if task.what else _LINES[self._kind]
        instruct = Instruct(prompt=f"{task.question} {line.instruction()}",
                            demonstration=line.demonstrate(task.answer, task.work))
        return Problem(key=task.prompt, prompt=task.prompt, demonstration=task.answer, hidden=task.answer,
                       instruct=instruct)

    def grade(self, task: Problem, answer: str) -> Grade:
        found = answers.final_answer(answer)
        same = _int_key if self._kind is AnswerKind.INT else (lambda text: text)
        problem = answers.one_value(found, same)
        if problem is not None:
            return malformed(problem)
        value = found.value
        if self._kind is AnswerKind.INT:
            got = _int_key(value)
            if got is None:
                return malformed(f"expected {self._kind.value}, got {value[:20]!r}")
            ok = got == int(task.hidden)
        else:
            if not _LETTERS_RE.match(value):
                return malformed(f"expected {self._kind.value}, got {value[:20]!r}")
            ok = value == task.hidden
        return passed() if ok else failed("wrong answer")
