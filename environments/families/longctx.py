"""Long-context retrieval over generated documents.

Variants:
  kv      -- "key-4821: 73915" records; return the value of one key.
  needle  -- filler prose hiding "The access code is 83921."; return the code.
  hop     -- "key-a points to key-b" links; follow a key two hops, return the
             final key.
  count   -- records tagged with colours; count the records of one colour.
Document length (in characters) sets the difficulty; `register_length` adds
domains of any other length (e.g. for context-length curricula).

Bare prompt: the document, "Q: <question>" and "A: ". Instruct: the document,
"Question: <question>" and the answer format ("Put your final answer on a
last line of the form `Answer: <value>`."); its demonstration names the
lines it read, then the answer line. Either style's final answer is read by
`environments.answers` (a bare token is its own).
"""

from __future__ import annotations

import re

import numpy as np

from environments import answers, registry
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, failed, malformed, passed

_WORDS = ("the", "a", "report", "shows", "market", "river", "north", "quiet", "green", "engine", "paper", "stone", "falls", "slowly", "under", "bright", "winter", "signal", "garden", "moves")
_COLOURS = ("red", "blue", "green", "amber")
# Registered lengths (characters of document) and their difficulty.
LENGTHS = {1024: "easy", 2048: "easy", 4096: "medium", 8192: "medium", 16384: "hard", 32768: "hard", 65536: "hard"}
_TOKEN_RE = re.compile(r"^[a-z0-9-]{1,32}$")
LINE = answers.AnswerLine("<value>")
INSTRUCT_EXTRA_CHARS = 384  # the instruct prompt's question and answer format, beyond the document
INSTRUCT_ANSWER_CHARS = 2048


def _key(rng: np.random.Generator) -> str:
    return f"key-{int(rng.integers(1000, 10000))}"


def _records(rng: np.random.Generator, chars: int, line) -> list[str]:
    lines, used = [], 0
    while used < chars:
        text = line()
        lines.append(text)
        used += len(text) + 1
    return lines


def _kv(rng, chars):
    keys, lines = set(), []
    for text in _records(rng, chars, lambda: f"{_key(rng)}: {int(rng.integers(10000, 100000))}"):
        k = text.split(":")[0]
        if k not in keys:  # unique keys: the answer is unambiguous
            keys.add(k)
            lines.append(text)
    target = lines[int(rng.integers(len(lines)))]
    k, v = target.split(": ")
    return "\n".join(lines), f"What is the value of {k}?", v, f'The line "{target}" gives it.'


def _needle(rng, chars):
    sentences = _records(rng, chars, lambda: " ".join(rng.choice(_WORDS, size=int(rng.integers(5, 12)))) + ".")
    code = str(int(rng.integers(10000, 100000)))
    sentences.insert(int(rng.integers(len(sentences) + 1)), f"The access code is {code}.")
    return " ".join(sentences), "What is the access code?", code, f'The text says "The access code is {code}."'


def _hop(rng, chars):
    n = max(4, chars // 28)
    keys = list(dict.fromkeys(_key(rng) for _ in range(2 * n)))[:n]
    nxt = {k: keys[int(rng.integers(len(keys)))] for k in keys}
    lines = [f"{k} points to {nxt[k]}" for k in keys]
    start = keys[int(rng.integers(len(keys)))]
    work = f"{start} points to {nxt[start]}, which points to {nxt[nxt[start]]}."
    question = f"Start at {start} and follow the pointer twice. Which key do you reach?"
    return "\n".join(lines), question, nxt[nxt[start]], work


def _count(rng, chars):
    lines = _records(rng, chars, lambda: f"{_key(rng)} is {_COLOURS[int(rng.integers(len(_COLOURS)))]}")
    colour = _COLOURS[int(rng.integers(len(_COLOURS)))]
    n = sum(line.endswith(f" {colour}") for line in lines)
    return "\n".join(lines), f"How many records are {colour}?", str(n), f"{n} lines end in {colour}."


_VARIANTS = {"kv": _kv, "needle": _needle, "hop": _hop, "count": _count}


class RetrievalDomain(Domain):
    answer_format = "a single token such as 73915 or key-1234"

    def __init__(self, spec: DomainSpec, variant: str, chars: int) -> None:
        self.spec = spec
        self._make = _VARIANTS[variant]
        self._chars = chars

    def sample(self, rng: np.random.Generator) -> Problem:
        document, question, answer, work = self._make(rng, self._chars)
        prompt = f"{document}\nQ: {question}\nA: "
        instruct = Instruct(prompt=f"{document}\n\nQuestion: {question}\n{LINE.instruction()}",
                            demonstration=LINE.demonstrate(answer, work))
        return Problem(key=f"longctx:{prompt}", prompt=prompt, demonstration=answer, hidden=answer, retry_cue="A: ",
                       instruct=instruct)

    def grade(self, task: Problem, answer: str) -> Grade:
        found = answers.final_answer(answer)
        problem = answers.one_value(found, str.lower)
        if problem is not None:
            return malformed(problem)
        value = found.value.lower()
        if not _TOKEN_RE.match(value):
            return malformed(f"expected {self.answer_format}, got {found.value[:20]!r}")
        return passed() if value == task.hidden else failed("wrong answer")


def register_length(chars: int, difficulty: str = "hard") -> list[DomainSpec]:
    """Registers every variant at document length `chars` (ids "...-<k>k-...")."""
    specs = []
    for variant in _VARIANTS:
        size = f"{chars // 1024}k" if chars % 1024 == 0 else str(chars)
        spec = DomainSpec(
            id=f"rlpt/longctx-{variant}-{size}-{difficulty}-v0",
            family="longctx",
            difficulty=difficulty,
            tags=("longctx", "retrieval", variant, f"chars-{chars}"),
            max_prompt_chars=chars + 256,
            max_answer_chars=32,
            description=f"{variant} retrieval over a ~{chars}-character document",
            max_instruct_prompt_chars=chars + 256 + INSTRUCT_EXTRA_CHARS,
            max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS,
        )
        registry.register(RetrievalDomain(spec, variant, chars))
        specs.append(spec)
    return specs


for _chars, _difficulty in LENGTHS.items():
    register_length(_chars, _difficulty)
