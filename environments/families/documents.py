"""Financial tables: look up and compute from a generated CSV.

Prompt: a CSV of (company, quarter, revenue, cost) rows in thousands of
dollars, then "Q: <question>\\nA: ". Numeric answers are graded with a
tolerance (relative 0.5%, absolute 0.01) and may carry "$", "," or "%";
company-name answers must match exactly (case-insensitive).

This is the easy rung of the financial documents: the table is given as
clean text. The next rungs are the finance family
(`environments.families.finance`): the same kinds of questions about
multi-page PDF reports read back by a PDF extractor (ruled and borderless
tables, charts), and FinQA / TAT-QA / ConvFinQA as published.
"""

from __future__ import annotations

import re

import numpy as np

from environments import registry
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Problem, failed, malformed, passed

_COMPANIES = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne")
_QUARTERS = ("Q1", "Q2", "Q3", "Q4")
# (companies, quarters) per difficulty: the table grows from 4 to 32 rows.
_SIZES = {"easy": (2, 2), "medium": (4, 3), "hard": (8, 4)}
_NUMBER_RE = re.compile(r"^[-+]?\$?[0-9][0-9,]*(\.[0-9]+)?%?$")
REL_TOL, ABS_TOL = 5e-3, 1e-2


def _table(rng: np.random.Generator, n_companies: int, n_quarters: int):
    names = [str(n) for n in rng.choice(_COMPANIES, size=n_companies, replace=False)]
    quarters = _QUARTERS[:n_quarters]
    revenue = rng.integers(100, 5000, size=(n_companies, n_quarters))
    cost = (revenue * rng.uniform(0.3, 1.1, size=revenue.shape)).astype(int)
    lines = ["company,quarter,revenue,cost"]
    lines += [f"{c},{q},{revenue[i, j]},{cost[i, j]}" for i, c in enumerate(names) for j, q in enumerate(quarters)]
    return names, quarters, revenue, cost, "\n".join(lines)


def _question(variant: str, rng: np.random.Generator, names, quarters, revenue, cost) -> tuple[str, str]:
    """(question, canonical answer) for one variant."""
    i = int(rng.integers(len(names)))
    j = int(rng.integers(len(quarters)))
    c, q = names[i], quarters[j]
    if variant == "lookup":
        return f"What was {c}'s revenue in {q}?", str(revenue[i, j])
    if variant == "profit":
        return f"What was {c}'s profit (revenue minus cost) in {q}?", str(revenue[i, j] - cost[i, j])
    if variant == "total":
        return f"What was {c}'s total revenue over all quarters?", str(int(revenue[i].sum()))
    if variant == "average":
        return f"What was {c}'s average cost per quarter (2 decimals)?", f"{cost[i].mean():.2f}"
    if variant == "margin":
        return f"What was {c}'s profit margin in {q}, in percent (1 decimal)?", f"{100 * (revenue[i, j] - cost[i, j]) / revenue[i, j]:.1f}"
    if variant == "growth":
        a, b = (0, len(quarters) - 1)
        return (
            f"By what percent did {c}'s revenue change from {quarters[a]} to {quarters[b]} (1 decimal)?",
            f"{100 * (revenue[i, b] - revenue[i, a]) / revenue[i, a]:.1f}",
        )
    if variant == "diff":
        k = (i + 1 + int(rng.integers(len(names) - 1))) % len(names)
        return f"How much more revenue did {c} make than {names[k]} in {q}?", str(revenue[i, j] - revenue[k, j])
    if variant == "argmax":
        return f"Which company had the highest revenue in {q}?", names[int(np.argmax(revenue[:, j]))]
    if variant == "argmin":
        return f"Which company had the lowest cost in {q}?", names[int(np.argmin(cost[:, j]))]
    raise ValueError(f"unknown documents variant {variant!r}")


VARIANTS = ("lookup", "profit", "total", "average", "margin", "growth", "diff", "argmax", "argmin")
_NAME_VARIANTS = ("argmax", "argmin")


def _parse_number(text: str) -> float | None:
    if not _NUMBER_RE.match(text):
        return None
    return float(text.replace("$", "").replace(",", "").rstrip("%"))


class TableQADomain(Domain):
    def __init__(self, spec: DomainSpec, variant: str, size: tuple[int, int]) -> None:
        self.spec = spec
        self._variant = variant
        self._size = size
        self.answer_format = "a company name" if variant in _NAME_VARIANTS else "a number such as 1234 or -5.5"

    def sample(self, rng: np.random.Generator) -> Problem:
        names, quarters, revenue, cost, table = _table(rng, *self._size)
        question, answer = _question(self._variant, rng, names, quarters, revenue, cost)
        prompt = f"{table}\nQ: {question}\nA: "
        return Problem(key=f"documents:{prompt}", prompt=prompt, demonstration=answer, hidden=answer, retry_cue="A: ")

    def grade(self, task: Problem, answer: str) -> Grade:
        if self._variant in _NAME_VARIANTS:
            if not answer.isalpha():
                return malformed(f"expected {self.answer_format}, got {answer[:20]!r}")
            return passed() if answer.lower() == task.hidden.lower() else failed("wrong company")
        got = _parse_number(answer)
        if got is None:
            return malformed(f"expected {self.answer_format}, got {answer[:20]!r}")
        want = float(task.hidden)
        ok = abs(got - want) <= max(ABS_TOL, REL_TOL * abs(want))
        return passed() if ok else failed("wrong value")


def _register() -> None:
    for variant in VARIANTS:
        for difficulty, size in _SIZES.items():
            spec = DomainSpec(
                id=f"rlpt/documents-{variant}-{difficulty}-v0",
                family="documents",
                difficulty=difficulty,
                tags=("documents", "tables", "numeric-tolerance", variant),
                max_prompt_chars=1024,
                max_answer_chars=32,
                description=f"{variant} question over a {size[0]}x{size[1]} revenue/cost table",
            )
            registry.register(TableQADomain(spec, variant, size))


_register()
