"""Financial reports: generated PDF annual reports, and FinQA / TAT-QA / ConvFinQA as published.

Generated (`rlpt/finance-report-<variant>-<difficulty>-v0`, registered on
import): a multi-page annual report (`environments.finance.reports`) is laid
out as a PDF with ruled and borderless tables and bar / line charts whose
values are only in their labels; the observation is the text pdfplumber reads
back (`environments.finance.pdf.text_of`), then the question. Variants (cell,
chart, compute, extract) are in `environments.finance.questions`; answers are
graded by `environments.finance.answers` (number normalisation, field by field
JSON). Easy: two years, one ruled table, one borderless table, a bar chart
(1-2 pages); medium: three years, a balance sheet, a line chart, a page of
risk factors; hard: four years, eight quarters, two pages of risk factors.

The instruct prompt style shows the same text, the question after
"Question:" and its answer format in words (a last line "Answer: ...", or the
JSON in one ```json fenced block: `answers.instruction`); both styles are
graded alike, from the reply's final answer.

Reports need the `finance` extra (reportlab, matplotlib, pdfplumber),
imported when a task is drawn. A report is made once per content and kept
(`_text`, least recently used, 256 reports), so replays and eval reuse it.

Published sets (nothing is downloaded; give the local files):

    from environments.families import finance
    spec = finance.register_source("rlpt/finance-finqa-v0", "finqa", "FinQA/dataset")
    finance.register_source("rlpt/finance-tatqa-v0", "tatqa", "TAT-QA/dataset_raw")
    finance.register_source("rlpt/finance-convfinqa-v0", "convfinqa", "ConvFinQA/data.zip")

Each row whose reference cannot be graded is refused alone, logged and kept
in the domain's `refused` (`environments.datasets.Refused`: where, id, why).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import pathlib
from typing import Sequence

import numpy as np

from environments import registry, splits
from environments.datasets import Refused
from environments.finance import answers, questions, reports, sources
from environments.registry import Domain, DomainSpec
from environments.verdicts import Grade, Instruct, Problem

logger = logging.getLogger(__name__)

FAMILY = "finance"
# Longest observation of each level, with room: the text of the longest report plus the question.
_MAX_PROMPT = {"easy": 4000, "medium": 8000, "hard": 12000}
_MAX_ANSWER = 1024
INSTRUCT_EXTRA_CHARS = 256  # the instruct prompt's wording beyond the bare one's
INSTRUCT_ANSWER_CHARS = 4096
STATEMENT_MAX_PROMPT_CHARS = 240  # the statement rung's longest prompt is 230 (tests/environments/test_finance.py)
_DRAWS = 1000  # candidate tasks drawn for one split before giving up (1 in 10 is eval)
EXTRA_HINT = "generated finance reports need the finance extra: pip install 'rlpt-environments[finance]'"


@functools.lru_cache(maxsize=256)
def _text(report: reports.Report) -> str:
    """The extracted text of `report`'s PDF, made once per report."""
    try:
        from environments.finance import pdf
        return pdf.text_of(pdf.render(report))
    except ImportError as e:
        raise ImportError(f"{EXTRA_HINT} ({e})") from e


def _digest(report: reports.Report, question: str) -> str:
    return hashlib.blake2b(repr((report, question)).encode(), digest_size=12).hexdigest()


class ReportDomain(Domain):
    """Questions of one variant about generated reports of one difficulty."""

    def __init__(self, spec: DomainSpec, variant: str) -> None:
        self.spec = spec
        self.variant = variant
        self.min_prompt_chars = 900  # the shortest report's text (`environments.bounded` skips probing)

    def _draw(self, rng: np.random.Generator) -> tuple[reports.Report, str, answers.Reference, str]:
        report = reports.draw(rng, self.spec.difficulty)
        question, ref = questions.ask(rng, report, self.variant, self.spec.difficulty)
        key = f"{self.spec.id}:{_digest(report, question)}"
        return report, question, ref, key

    def _prompt(self, text: str, question: str, ref: answers.Reference) -> str:
        return f"{text}\n\nQ: {question}\nAnswer with {ref.answer_format}.\nA: "

    def _task(self, report: reports.Report, question: str, ref: answers.Reference, key: str) -> Problem:
        text = _text(report)
        prompt = self._prompt(text, question, ref)
        instruct = Instruct(sources.instruct_prompt([text], question, ref), answers.demonstrate_instruct(ref))
        if not (self.min_prompt_chars <= len(prompt) <= self.spec.max_prompt_chars
                and len(instruct.prompt) <= self.spec.max_instruct_prompt_chars):  # the bounds the spec promises
            raise RuntimeError(f"{self.spec.id}: a report of {len(prompt)} characters ({len(instruct.prompt)} in "
                               f"the instruct style), outside [{self.min_prompt_chars}, {self.spec.max_prompt_chars}] "
                               f"({self.spec.max_instruct_prompt_chars})")
        return Problem(key=key, prompt=prompt, demonstration=answers.demonstrate(ref), hidden=ref, retry_cue="A: ",
                       instruct=instruct)

    def sample(self, rng: np.random.Generator) -> Problem:
        return self._task(*self._draw(rng))

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem:
        """Draws reports and questions (cheap) until one's key is of `split`, then makes its PDF."""
        split = splits.check_split(split)
        for _ in range(_DRAWS):
            drawn = self._draw(rng)
            if splits.split_of(drawn[3]) == split:
                return self._task(*drawn)
        raise RuntimeError(f"{self.spec.id}: no {split!r} task in {_DRAWS} draws")

    def grade(self, task: Problem, answer: str) -> Grade:
        return answers.grade(task.hidden, answer)


class StatementDomain(ReportDomain):
    """The brief rung: one cell of a one-table income statement PDF
    (`reports.statement`), read back by pdfplumber, asked in one line; short
    enough for the tiny base's context (experiments/domains.py MIXED_REAL)."""

    def __init__(self, spec: DomainSpec) -> None:
        super().__init__(spec, "cell")
        self.min_prompt_chars = 120

    def _draw(self, rng: np.random.Generator) -> tuple[reports.Report, str, answers.Reference, str]:
        report = reports.statement(rng)
        question, ref = questions.brief_cell(rng, report)
        return report, question, ref, f"{self.spec.id}:{_digest(report, question)}"

    def _prompt(self, text: str, question: str, ref: answers.Reference) -> str:
        return f"{text}\nQ: {question}\nA: "


class SourceDomain(Domain):
    """The gradable rows of a published set (`environments.finance.sources`)."""

    def __init__(self, spec: DomainSpec, rows: Sequence[sources.Row], refused: Sequence[Refused]) -> None:
        self.spec = spec
        self.refused = tuple(refused)
        self.rows = tuple(rows)  # with each row's published answer as written
        self._tasks = tuple(r.task for r in rows)
        self._by_split = {s: np.array([i for i, r in enumerate(rows) if r.split == s], dtype=np.int64)
                          for s in splits.SPLITS}

    def split_sizes(self) -> dict[str, int]:
        return {s: len(ix) for s, ix in self._by_split.items()}

    def sample_in_split(self, rng: np.random.Generator, split: str) -> Problem:
        rows = self._by_split[splits.check_split(split)]
        if len(rows) == 0:
            raise ValueError(f"{self.spec.id!r} has no {split!r} rows (a train file is train, dev/test eval)")
        return self._tasks[int(rows[int(rng.integers(len(rows)))])]

    def sample(self, rng: np.random.Generator) -> Problem:
        return self._tasks[int(rng.integers(len(self._tasks)))]

    def grade(self, task: Problem, answer: str) -> Grade:
        return answers.grade(task.hidden, answer)


def refusal_summary(refused: Sequence[Refused], limit: int = 5) -> str:
    shown = "; ".join(f"{r.where} (id {r.id}): {r.reason}" for r in refused[:limit])
    return f"{len(refused)} rows refused: {shown}" + (f"; and {len(refused) - limit} more" if len(refused) > limit else "")


def register_source(domain_id: str, source: str, path: str | pathlib.Path, difficulty: str = "medium",
                    strict: bool = False) -> DomainSpec:
    """Loads a published set (`source`: finqa, tatqa or convfinqa) from `path` (a
    JSON file, its folder, or ConvFinQA's data.zip) and registers it as
    `domain_id` ("rlpt/finance-<name>-v<N>"). `strict`: the first refused row
    raises ValueError instead of being left out."""
    if not domain_id.startswith(f"rlpt/{FAMILY}-"):
        raise ValueError(f"finance domain id {domain_id!r} must look like 'rlpt/{FAMILY}-<name>-v<N>'")
    rows, refused = sources.load(source, path)
    if refused and strict:
        first = refused[0]
        raise ValueError(f"{path}: {first.where} (id {first.id}): {first.reason}")
    if not rows:
        raise ValueError(f"{path}: no row of the {source} file(s) can be graded; {refusal_summary(refused)}")
    if refused:
        logger.warning("%s: %s", path, refusal_summary(refused))
    spec = DomainSpec(
        id=domain_id, family=FAMILY, difficulty=difficulty, tags=(FAMILY, source, "tables", "numeric-tolerance"),
        max_prompt_chars=max(len(r.task.prompt) for r in rows),
        max_answer_chars=max(_MAX_ANSWER, *(len(r.task.demonstration) for r in rows)),
        max_instruct_prompt_chars=max(len(r.task.instruct.prompt) for r in rows),
        max_instruct_answer_chars=max(INSTRUCT_ANSWER_CHARS, *(len(r.task.instruct.demonstration) for r in rows)),
        description=f"{source} from {pathlib.Path(path).name}: {len(rows)} rows"
                    + (f" ({len(refused)} refused)" if refused else ""))
    registry.register(SourceDomain(spec, rows, refused))
    return spec


def _register() -> None:
    for variant in questions.VARIANTS:
        for difficulty in registry.DIFFICULTIES:
            spec = DomainSpec(
                id=f"rlpt/{FAMILY}-report-{variant}-{difficulty}-v0", family=FAMILY, difficulty=difficulty,
                tags=(FAMILY, "pdf", "tables", "charts", "numeric-tolerance", variant),
                max_prompt_chars=_MAX_PROMPT[difficulty], max_answer_chars=_MAX_ANSWER,
                description=f"{variant} question about a generated {difficulty} PDF annual report",
                max_instruct_prompt_chars=_MAX_PROMPT[difficulty] + INSTRUCT_EXTRA_CHARS,
                max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS)
            registry.register(ReportDomain(spec, variant))
    registry.register(StatementDomain(DomainSpec(
        id=f"rlpt/{FAMILY}-statement-cell-easy-v0", family=FAMILY, difficulty="easy",
        tags=(FAMILY, "pdf", "tables", "numeric-tolerance", "cell", "brief"), max_prompt_chars=STATEMENT_MAX_PROMPT_CHARS,
        max_answer_chars=_MAX_ANSWER, description="one cell of a generated one-table income statement PDF",
        max_instruct_prompt_chars=STATEMENT_MAX_PROMPT_CHARS + INSTRUCT_EXTRA_CHARS,
        max_instruct_answer_chars=INSTRUCT_ANSWER_CHARS)))


_register()
