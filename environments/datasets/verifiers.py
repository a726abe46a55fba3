"""Verifier kinds for dataset domains: name -> grading function.

A verifier kind grades one answer against one reference string from the file:
`grade(answer_text, reference, options) -> Grade`. The answer has already been
stripped, length-checked and UTF-8-checked by the env. `options` is the kind's
defaults updated with the user's options (unknown option names are rejected
at registration). Built-in kinds:

* math: answers and references are read and compared by Math-Verify 0.9.0
  (`math_verify`, with latex2sympy2_extended). The final answer is found by
  `environments.answers.final_answer`, the one extraction every grader uses
  (shared here with exact, numeric and regex through `answer_candidates`):
  (1) a last line that is a number alone, else the last final answer
  statement ("Final Answer: The final answer is ...", "The answer is ...",
  "Answer: ...", "#### N"), whatever boxes come before it; a \\boxed{} or
  $...$ in it is the answer (Minerva's "... is $\\frac{1}{2}$. I hope it is
  correct." is 1/2), else its first value; (2) else the last \\boxed{} /
  \\fbox{}; (3) else the whole text if it is a formula, else its last LaTeX
  formula or number not inside a word ("AZYUK2A" has none). An answer that
  gives several different final answers (two answer lines, several boxes that
  differ, "Answer: 3 or 4") is MALFORMED, saying so; a reference is read the
  same way without that check. Accepted as references and answers:
  numbers, fractions, LaTeX expressions, tuples and points, sets, intervals,
  inequalities, matrices, equations, percentages (50% equals 0.5 and 50),
  units (\\text{cm}, "18 eggs"), currency (\\$16), thousands separators (1,234,
  14{,}916, 16,\\!386.20). A formula Math-Verify finds but cannot value (a time
  12:00) matches only the same formula. Floats compare at 6 decimals (0.333 is
  not 1/3). Values are size-bounded before comparison (bracket depth, digits
  per literal, node count, exponent size, factorials, sum ranges, no power
  towers like 9**9**9), which is also what bounds the time: Math-Verify's
  SIGALRM time-outs are off, so grading works in worker threads. Not a value:
  MALFORMED, saying what was found (a box, a statement, nothing); an error
  Math-Verify does not expect raises (an infrastructure verdict, never FAIL).
* exact: the final answer (after the last answer statement, else the last
  box, else the whole answer) equal to the reference after optional case and
  whitespace normalisation.
* choice: one letter (A-D by default, `letters` option); refuses answers naming
  two different letters.
* numeric: one number within `rel_tol` / `abs_tol` of the reference.
* regex: the reference is a pattern that must fullmatch the extracted answer.
* code (`environments.datasets.code`): the reference is unit tests (MBPP
  asserts, a HumanEval check(candidate), or stdin/stdout pairs) run against
  the answer program in the sandbox.

More kinds are added by calling `register_verifier(VerifierKind(...))`;
nothing else changes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, Callable, Mapping

from environments import answers
from environments.verdicts import Grade, failed, malformed, passed


@dataclasses.dataclass(frozen=True)
class VerifierKind:
    """One verifier kind.

    grade: (answer_text, reference, options) -> Grade.
    defaults: every option the kind accepts, with its default value.
    check_reference: (reference, options) -> error message or None; run on
      every row when a file is registered, so a reference the verifier can
      never match is a load error, not a silent zero reward.
    demonstrate: reference -> one answer that PASSes ("" when none is known,
      e.g. for regex references).
    answer_format: short description of an accepted answer (MALFORMED hints).
    prepare: optional (reference, row, options) -> grading data, run on every
      row at registration (after check_reference) with the row's
      `loaders.Row`; raises ValueError for a reference it cannot use. Its
      result is cached as the task's hidden data and is what `grade` then
      receives as `reference` (e.g. the code kind's parsed ProgramTests).
    structured_reference: the answer field may be a list or object (given to
      check_reference/prepare as its JSON text).
    tags: extra domain tags for domains of this kind ("sandbox" routes grading
      to sandbox workers in the trainer).
    max_answer_chars: default answer length limit for domains of this kind
      (None: the dataset default).
    instruct: how the instruct prompt style asks for the answer (a last line
      `Answer: ...`, or one fenced block: `environments.answers`), which the
      grader reads; every kind's prompt gets its `instruction()`.
    """

    name: str
    grade: Callable[[str, Any, Mapping[str, Any]], Grade]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    check_reference: Callable[[str, Mapping[str, Any]], str | None] = lambda ref, opts: None
    demonstrate: Callable[[str], str] = lambda ref: ref
    answer_format: str = ""
    prepare: Callable[[str, Any, Mapping[str, Any]], Any] | None = None
    structured_reference: bool = False
    tags: tuple[str, ...] = ()
    max_answer_chars: int | None = None
    instruct: answers.AnswerLine | answers.Fenced = answers.AnswerLine("<answer>")

    def instruct_demonstrate(self, reference: str) -> str:
        """The instruct prompt style's demonstration: `demonstrate`'s answer in
        `instruct`'s form ("" when no answer is known)."""
        shown = self.demonstrate(reference)
        return self.instruct.demonstrate(shown) if shown else ""


_KINDS: dict[str, VerifierKind] = {}


def register_verifier(kind: VerifierKind) -> VerifierKind:
    """Adds a verifier kind; duplicate names raise ValueError."""
    if kind.name in _KINDS:
        raise ValueError(f"verifier kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def verifier_kinds() -> list[str]:
    return sorted(_KINDS)


def get_verifier(name: str) -> VerifierKind:
    """The kind called `name`; unknown names raise ValueError listing the known ones."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown verifier kind {name!r}; known kinds: {verifier_kinds()}") from None


def resolve_options(kind: VerifierKind, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`kind.defaults` updated with `options`; unknown option names raise ValueError."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(kind.defaults))
    if unknown:
        raise ValueError(f"verifier {kind.name!r} has no options {unknown}; allowed: {sorted(kind.defaults)}")
    return {**kind.defaults, **options}


# ----------------------------------------------------------------------------
# Final-answer extraction: `environments.answers`, shared by every grader (and
# here by math, exact, numeric and regex). Re-exported under the names this
# module has given them.

FinalAnswer = answers.FinalAnswer
final_answer = answers.final_answer
last_boxed = answers.last_boxed
_clean = answers.clean
_BOXED_RE = answers.BOXED_RE
_LATEX_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|(?<![\\\d])\$([^$\n]+?)(?<!\\)\$|\\\((.+?)\\\)", re.DOTALL)
# A number not inside a word (so "AZYUK2A" has none): thousands separators, decimals, a/b, %.
_NUMBER_RE = re.compile(
    r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?%?(?![\w.]*[A-Za-z])|(?<![\w.])-?\.\d+%?")


def _one_answer(found: FinalAnswer, alternatives: bool = True) -> Grade | None:
    """MALFORMED when the reply gives several different final answers (or, with
    `alternatives`, one that offers a choice: "3 or 4"), else None."""
    problem = answers.one_value(found) if alternatives else (
        answers.several_feedback(many) if (many := answers.several(found)) else None)
    return malformed(problem) if problem else None


def answer_candidates(text: str) -> list[str]:
    """Final-answer strings for the numeric and regex kinds, best first, found
    in `final_answer`'s order: within the statement or the box text, the last
    \\boxed{} content, then the first $...$ formula, then the text itself, then
    its first number; for the whole text, the text, then its last number."""
    found = final_answer(text)
    out: list[str] = []
    if found.source == "text":
        out.append(_clean(text))
        numbers = _NUMBER_RE.findall(text)
        if numbers:
            out.append(numbers[-1])
        return out
    boxed = last_boxed(found.text)
    if boxed is not None:
        out.append(_clean(boxed))
    if found.source == "statement":
        span = _LATEX_SPAN_RE.search(found.text)
        if span:
            out.append(_clean(next(g for g in span.groups() if g is not None)))
        plain = _clean(re.split(r"\.\s|\bI hope\b", found.text)[0])
        out.append(plain)
        first = _NUMBER_RE.search(plain)
        if first:
            out.append(first.group(0))
    return [c for c in dict.fromkeys(out) if c]


# ----------------------------------------------------------------------------
# math: values parsed and compared by Math-Verify (math_verify 0.9.0 with
# latex2sympy2_extended). Its own time-outs use SIGALRM, which only the main
# thread may set, and graders run in worker threads: they are off here, and
# time is bounded instead by refusing, before comparison, any value whose size
# could make sympy slow (see `_bounded`).

MAX_STATEMENT_CHARS = 300
MAX_LITERAL_DIGITS = 40
MAX_NODES = 400
MAX_EXPONENT = 64
MAX_FACTORIAL = 1000
MAX_TERMS = 10_000
MAX_DEPTH = 24  # brackets: the LaTeX parser's time grows steeply with nesting

_THOUSANDS_RE = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d])")
_LHS_RE = re.compile(r"^\s*[A-Za-z](?:_\w+|\w{0,2})?\s*=(?!=)")
_LONG_LITERAL_RE = re.compile(r"\d{%d,}" % (MAX_LITERAL_DIGITS + 1))
_BARE_NUMBER_RE = answers.NUMBER_LINE_RE
# Words that may appear in a formula; any other word of three or more letters,
# or a short English word, makes a text prose rather than a formula.
_FORMULA_WORDS = {
    "sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "log", "ln",
    "exp", "sqrt", "pi", "and", "or", "mod", "gcd", "lcm", "max", "min", "det", "inf", "infty",
}
_SHORT_WORDS = {"is", "of", "to", "in", "it", "so", "we", "be", "as", "at", "by", "if", "on", "an", "no", "not", "the"}
_PERCENT_WORDS = {"percent", "percentage", "pct"}
# "18 eggs", "3 hours.": a value followed by plain unit words. Each word is a
# whole run of letters ((?![A-Za-z])): were a run splittable into words, a
# run of n letters not followed by the end would be tried in exponentially
# many splits (40 letters took 18 s, holding the GIL: every thread stalls).
_UNIT_WORDS_RE = re.compile(r"^(.*?[\d}).])\s+((?:[A-Za-z]{2,}(?![A-Za-z])\.?\s*)+)$", re.DOTALL)


def _words(text: str) -> list[str]:
    text = re.sub(r"\\(?:text\w*|math\w*|mbox|operatorname|begin|end)\s*\{[^{}]*\}", " ", text)
    return re.findall(r"[A-Za-z]+", re.sub(r"\\[A-Za-z]+", " ", text))


def _is_prose(text: str) -> bool:
    return any((len(w) >= 3 and w.lower() not in _FORMULA_WORDS | _PERCENT_WORDS) or w.lower() in _SHORT_WORDS
               for w in _words(text))


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c in "([{" and 1 or -(c in ")]}")
        if c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _strip_unit_words(text: str) -> str:
    """"18 eggs" -> "18", "{35 cm, 4}" -> "{35, 4}": plain unit words after a
    value dropped (in each comma-separated item); percent words and function
    names are kept (they are values)."""
    if "," in text:
        inner = text[1:-1] if text[:1] in "({[" and text[-1:] in ")}]" else None
        items = _split_top(text if inner is None else inner)
        if len(items) > 1:
            joined = ",".join(_strip_one_unit(item) for item in items)
            return joined if inner is None else text[0] + joined + text[-1]
    return _strip_one_unit(text)


def _strip_one_unit(text: str) -> str:
    match = _UNIT_WORDS_RE.match(text)
    if match is None:
        return text
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", match.group(2))]
    if any(w in _PERCENT_WORDS or w in _FORMULA_WORDS for w in words):
        return text
    return text[:len(text) - len(text.lstrip())] + match.group(1).strip()


def _prepare(text: str) -> str:
    """LaTeX that Math-Verify misreads, rewritten: \\fbox as \\boxed, \\mathrm{e}
    as e (it drops \\mathrm{e} as a unit, reading 1-1/\\mathrm{e} as 1), and
    unit words after a boxed value dropped (\\boxed{18 eggs} is 18)."""
    # Runs of white space as one: Math-Verify's normalisation is quadratic in a
    # run's length (5,000 spaces took 29 s).
    text = re.sub(r"[^\S\n]+", " ", text)
    text = re.sub(r" ?\n\s*", "\n", text)
    text = _BOXED_RE.sub(r"\\boxed{", text)
    text = re.sub(r"\\math(?:rm|it)\s*\{\s*e\s*\}", "e", text)
    out, i = [], 0
    for start, content_start, content_end in answers.box_spans(text):
        if start < i:
            continue  # inside a box already rewritten
        out.append(text[i:content_start] + _strip_unit_words(text[content_start:content_end].strip()) + "}")
        i = content_end + 1
    text = "".join(out) + text[i:]
    return re.sub(r"(?<![\\\d$])\$([^$\n]+?)(?<!\\)\$", lambda m: f"${_strip_unit_words(m.group(1).strip())}$", text)


@functools.lru_cache(maxsize=1)
def _targets() -> dict[str, list[Any]]:
    """Math-Verify's extraction regexes: "latex" (formulas and boxes), "expr"
    (numbers and plain arithmetic), "default" (both), "anchored" (the first
    value after "answer"), "boxed" (boxes only, joined when several are listed)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import get_extraction_regexes

    latex = LatexExtractionConfig(boxed_match_priority=0)
    boxed_only = LatexExtractionConfig(boxed_match_priority=7)  # 7: no other pattern has it
    [(patterns, _)] = get_extraction_regexes([boxed_only])
    return {
        "latex": get_extraction_regexes([latex]),
        "expr": get_extraction_regexes([ExprExtractionConfig()]),
        "default": get_extraction_regexes([latex, ExprExtractionConfig()]),
        "anchored": get_extraction_regexes([LatexExtractionConfig(try_extract_without_anchor=False, boxed_match_priority=-1),
                                            ExprExtractionConfig(try_extract_without_anchor=False)]),
        "boxed": [([(p, prio) for p, prio in patterns if prio == 7], boxed_only)],
    }


@dataclasses.dataclass(frozen=True)
class Formula:
    """A formula Math-Verify finds but cannot give a finite value
    ("x = \\frac12, x = \\frac{-1 \\pm \\sqrt{13}}{4}", a time "12:00"): its
    normalised LaTeX. As a reference it matches only the same formula."""

    latex: str


def _extract(text: str, targets: str) -> Any | None:
    """The finite value Math-Verify extracts from `text` with `targets` (see
    `_targets`), else the `Formula` it found, else None."""
    import sympy
    from math_verify.parser import extract_target_from_pred

    found = extract_target_from_pred(text, _targets()[targets], fallback_mode="first_match", extraction_mode="any_match")
    for value in found:
        if isinstance(value, (sympy.Basic, sympy.MatrixBase)) and not (value == sympy.nan or value == sympy.zoo):
            return value
    strings = [s.strip() for s in found if isinstance(s, str) and s.strip()]
    return Formula(strings[-1]) if strings else None


def _has_formula(text: str) -> bool:
    return _LATEX_SPAN_RE.search(text) is not None


def _plain_value(text: str, anchored: bool) -> Any | None:
    """The value of text without LaTeX delimiters: a bare number ("1,234",
    "$16", "28%"), else the whole text as a formula if it is not prose
    ("2x+1", "\\sqrt 2+\\sqrt 5"), else its first value (`anchored`, as after
    "the answer is": "21, not 12" is 21) or its last value not inside a word."""
    text = _strip_unit_words(_clean(text))
    if not text:
        return None
    if _BARE_NUMBER_RE.fullmatch(text):
        return _extract(re.sub(r"\\(?=[$€£¥%])", "", text), "expr")
    if not _is_prose(text):
        value = _extract(f"${text}$", "latex")
        if value is not None:
            return value
    return _extract(f"Answer: {text}", "anchored") if anchored else _extract(text, "default")


def _depth(text: str) -> int:
    depth = deepest = 0
    for c in text:
        if c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}":
            depth = max(0, depth - 1)
    return deepest


def _math_value(found: FinalAnswer) -> tuple[Any | None, str]:
    """(value, why not): the Math-Verify value at `found`, or None and the reason
    for the MALFORMED feedback."""
    text = _prepare(found.text)
    if found.source == "statement" and not _BOXED_RE.search(text):
        text = text[:MAX_STATEMENT_CHARS]  # Math-Verify's anchored patterns look 100 characters on
    elif found.source == "text" and len(text) > MAX_STATEMENT_CHARS:
        # No final answer marked: its last value, read from the reply's end
        # (from a word boundary), as LaTeX parsing grows faster than linearly.
        tail = text[-MAX_STATEMENT_CHARS:]
        space = re.search(r"\s", tail)
        text = tail[space.end():] if space else tail
    if _LONG_LITERAL_RE.search(text.replace(",", "")):
        return None, f"the answer has a number longer than {MAX_LITERAL_DIGITS} digits"
    if _depth(text) > MAX_DEPTH:
        return None, f"the answer nests brackets more than {MAX_DEPTH} deep"
    if found.source != "text" and _BOXED_RE.search(text):
        boxed = last_boxed(text) or ""
        if len(boxed) > MAX_STATEMENT_CHARS:
            return None, f"the boxed answer is longer than {MAX_STATEMENT_CHARS} characters"
        value = None if _is_prose(boxed) else _extract(text, "boxed")
        why = f"the boxed answer {_clean(last_boxed(text) or '')[:60]!r} is not a value (a number or a LaTeX expression)"
    elif found.source == "statement":
        # Math-Verify's anchored patterns see the statement ("Final Answer: The
        # volume of $V$ is 120." is 120); a formula without delimiters is read whole.
        plain = _strip_unit_words(_clean(re.split(r"\.(?:\s|$)|\bI hope\b", text)[0]))
        value = None
        if plain and not _has_formula(plain) and not _is_prose(plain) and not _BARE_NUMBER_RE.fullmatch(plain):
            value = _extract(f"${plain}$", "latex")
        if value is None:
            anchor = "Answer:" if found.anchor == "####" else found.anchor
            value = _extract(f"{anchor} {text}", "default")
        why = f"the final answer statement {_clean(text)[:60]!r} holds no value (a number or a LaTeX expression)"
    else:
        value = _extract(text, "default") if _has_formula(text) else _plain_value(text, anchored=False)
        why = "no final answer found; end with 'The answer is <value>' or \\boxed{<value>}"
    if value is not None and not isinstance(value, Formula) and not _bounded(value):
        return None, "the answer is too large to evaluate (too many terms, digits or nested powers)"
    return value, why


def _magnitude(expr: Any) -> float:
    """|expr| for a number-valued expression; 1 for a symbolic one."""
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols:
        return 1.0
    try:
        return abs(complex(sympy.N(expr, 15)))
    except (TypeError, ValueError, OverflowError):
        return 1.0  # not a number (an undefined function): nothing to evaluate either


def _bounded(value: Any, budget: float = MAX_EXPONENT**2) -> bool:
    """True if `value` is small enough to compare quickly: at most MAX_NODES
    nodes, integers of at most MAX_LITERAL_DIGITS digits, factorials of at most
    MAX_FACTORIAL, sums and products of at most MAX_TERMS terms, and every power
    with an exponent whose size, times that of every enclosing power's
    exponent, is at most `budget` (so towers like 9**9**9 or
    ((10**40)**64)**64 are refused before anything is computed)."""
    import sympy

    if isinstance(value, sympy.MatrixBase):
        value = sympy.Tuple(*value)
    if not isinstance(value, sympy.Basic):
        return False
    nodes = sum(1 for _ in zip(range(MAX_NODES + 1), sympy.preorder_traversal(value)))
    if nodes > MAX_NODES:
        return False

    def ok(node: Any, room: float) -> bool:
        if isinstance(node, sympy.MatrixBase):
            return all(ok(x, room) for x in node)
        if isinstance(node, sympy.Integer) and len(str(abs(node.p))) > MAX_LITERAL_DIGITS:
            return False
        if isinstance(node, sympy.Rational) and max(len(str(abs(node.p))), len(str(node.q))) > MAX_LITERAL_DIGITS:
            return False
        if isinstance(node, sympy.Pow):
            if not ok(node.exp, room):
                return False
            size = _magnitude(node.exp)
            return size <= room and ok(node.base, room / max(1.0, size))
        if isinstance(node, (sympy.factorial, sympy.gamma, sympy.binomial, sympy.factorial2, sympy.subfactorial)):
            return all(ok(a, room) and _magnitude(a) <= MAX_FACTORIAL for a in node.args)
        if isinstance(node, (sympy.Sum, sympy.Product)):
            for limit in node.limits:
                if len(limit) == 3 and _magnitude(limit[2] - limit[1]) > MAX_TERMS:
                    return False
        return all(ok(arg, room) for arg in node.args)

    return ok(value, budget)


@functools.lru_cache(maxsize=8192)
def _reference_value(reference: str) -> tuple[Any | None, str]:
    value, why = _math_value(final_answer(reference))
    if isinstance(value, Formula) and _is_prose(value.latex):
        return None, f"{value.latex[:60]!r} is prose, not a formula"
    return value, why


def math_equal(answer: str, reference: str) -> bool:
    """True if the final answer of `answer` has the value of `reference` (see
    the module docstring); False if it differs or is no value."""
    want, _ = _reference_value(reference)
    got, _ = _math_value(final_answer(answer))
    return want is not None and got is not None and _equal(want, got)


def _equal(want: Any, got: Any) -> bool:
    if isinstance(want, Formula) or isinstance(got, Formula):
        return isinstance(want, Formula) and isinstance(got, Formula) and want.latex == got.latex
    return _verify(want, got)


def _verify(want: Any, got: Any) -> bool:
    """Math-Verify's comparison (floats rounded to 6 decimals, variables named
    alike), without its SIGALRM time-out; errors it does not expect raise."""
    from math_verify import grader

    grader.TIMEOUT_WARNING_SHOWN = True  # no time-out on purpose: `_bounded` keeps comparisons short
    return grader.verify(want, got, float_rounding=6, numeric_precision=15, strict=True,
                         timeout_seconds=None, raise_on_error=True)


def _grade_math(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    """PASS/FAIL on the value at the answer's final answer (`final_answer`);
    MALFORMED, saying what was found, when that is no value."""
    want, why = _reference_value(reference)
    if want is None:
        raise ValueError(f"math reference {reference[:60]!r} is not a value: {why}")
    found = final_answer(answer)
    several = _one_answer(found)
    if several is not None:
        return several
    got, why = _math_value(found)
    if got is None:
        return malformed(why)
    if isinstance(got, Formula) and not isinstance(want, Formula):
        return malformed(f"{got.latex[:60]!r} is not a value the verifier can read (a number or a LaTeX expression)")
    return passed() if _equal(want, got) else failed("wrong answer")


def _check_math_reference(reference: str, options: Mapping[str, Any]) -> str | None:
    # A worked solution is read as an answer is (its final statement, else its
    # last box); one with neither, prose over several lines, is refused: its
    # last number would be a guess at the reference.
    lines = [line for line in reference.strip().split("\n") if line.strip()]
    if len(lines) > 1 and final_answer(reference).source == "text" and _is_prose(_clean(reference)):
        return (f"reference {reference[:40]!r} is a worked solution ({len(lines)} lines) with no final "
                "answer statement or box; say where its answer is with reference='after:<marker>' "
                "(GSM8K: 'after:####'), reference='boxed' (MATH) or reference='regex:<one group>'")
    value, why = _reference_value(reference)
    return None if value is not None else f"reference {reference[:40]!r} is not a math value the verifier can parse ({why})"


# ----------------------------------------------------------------------------
# exact


def _exact_norm(text: str, options: Mapping[str, Any]) -> str:
    if options["strip"]:
        text = text.strip()
    if options["collapse_whitespace"]:
        text = " ".join(text.split())
    if options["ignore_case"]:
        text = text.casefold()
    return text


def _grade_exact(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    """The final answer (after the last answer statement, else the last box, else
    the whole answer) equal to the reference after the options' normalisation."""
    found = final_answer(answer, number_line=False)
    several = _one_answer(found, alternatives=False)
    if several is not None:
        return several
    return passed() if _exact_norm(found.value, options) == _exact_norm(reference, options) else failed("wrong answer")


# ----------------------------------------------------------------------------
# choice


def _letter_sets(text: str, letters: str) -> list[set[str]]:
    """Letter sets found by each strategy, strongest first."""
    cls = f"[{re.escape(letters)}]"
    bare = re.sub(r"[\s*_`.()\[\]:]", "", text)
    found: list[set[str]] = [{bare.upper()} if len(bare) == 1 and bare.upper() in letters else set()]
    found.append({m.upper() for m in re.findall(
        rf"answer\s*(?:is|:)?\s*:?\s*(?:option\s*)?[*(\[]*({cls})(?![A-Za-z])", text, re.IGNORECASE)})
    boxed = last_boxed(text)
    found.append({boxed.strip().upper()} if boxed and boxed.strip().upper() in letters else set())
    lead = re.match(rf"^\s*[*(\[]*({cls})\s*[).:\]*]", text)
    found.append({lead.group(1)} if lead else set())
    marked = re.findall(rf"\*\*\s*\(?({cls})\)?\s*\*\*|\(({cls})\)", text)
    found.append({x for pair in marked for x in pair if x})
    found.append(set(re.findall(rf"(?<![A-Za-z']){cls}(?![A-Za-z'])", text)))
    return found


def extract_choice(text: str, letters: str) -> str | None | tuple[str, ...]:
    """The one letter `text` names, None if none, or the sorted tuple of letters
    when the strongest strategy that finds any finds two or more."""
    for found in _letter_sets(text, letters):
        if len(found) == 1:
            return next(iter(found))
        if len(found) > 1:
            return tuple(sorted(found))
    return None


def _grade_choice(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    letters = options["letters"]
    got = extract_choice(answer, letters)
    if got is None:
        return malformed(f"expected one of the letters {', '.join(letters)}")
    if isinstance(got, tuple):
        return malformed(f"answer names several letters {', '.join(got)}; name exactly one")
    return passed() if got == extract_choice(reference, letters) else failed("wrong answer")


def _check_choice_reference(reference: str, options: Mapping[str, Any]) -> str | None:
    got = extract_choice(reference, options["letters"])
    return None if isinstance(got, str) else f"reference {reference[:40]!r} is not one of the letters {options['letters']}"


# ----------------------------------------------------------------------------
# numeric


def parse_number(text: str) -> float | None:
    """A plain number (thousands separators, a/b fractions and % allowed), else None."""
    s = _clean(text).replace("$", "")
    s = _THOUSANDS_RE.sub(lambda m: m.group(0).replace(",", ""), s)
    lhs = _LHS_RE.match(s)
    if lhs:
        s = s[lhs.end():].strip()
    scale = 1.0
    if s.endswith("%"):
        s, scale = s[:-1].strip(), 0.01
    try:
        if re.fullmatch(r"-?\d+\s*/\s*\d+", s):
            num, den = s.split("/")
            return int(num) / int(den) * scale if int(den) else None
        if re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?", s):
            value = float(s) * scale
            return value if math.isfinite(value) else None
    except (ValueError, OverflowError):
        return None
    return None


def _grade_numeric(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    want = parse_number(reference)
    assert want is not None  # checked at registration
    several = _one_answer(final_answer(answer))
    if several is not None:
        return several
    for candidate in answer_candidates(answer):
        got = parse_number(candidate)
        if got is not None:
            ok = math.isclose(got, want, rel_tol=options["rel_tol"], abs_tol=options["abs_tol"])
            return passed() if ok else failed("wrong answer")
    return malformed("no number found in the answer")


def _check_numeric_reference(reference: str, options: Mapping[str, Any]) -> str | None:
    return None if parse_number(reference) is not None else f"reference {reference[:40]!r} is not a number"


# ----------------------------------------------------------------------------
# regex


def _grade_regex(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    several = _one_answer(final_answer(answer), alternatives=False)
    if several is not None:
        return several
    pattern = re.compile(reference, re.IGNORECASE if options["ignore_case"] else 0)
    candidates = [answer] + answer_candidates(answer)
    return passed() if any(pattern.fullmatch(c) for c in candidates) else failed("answer does not match")


def _check_regex_reference(reference: str, options: Mapping[str, Any]) -> str | None:
    try:
        re.compile(reference)
    except re.error as e:
        return f"reference {reference[:40]!r} is not a valid regular expression ({e})"
    return None


register_verifier(VerifierKind(
    "math", _grade_math, {}, _check_math_reference,
    answer_format="a final value, e.g. 'Answer: 42' or \\boxed{\\frac{1}{2}}"))
register_verifier(VerifierKind(
    "exact", _grade_exact, {"ignore_case": True, "collapse_whitespace": True, "strip": True},
    answer_format="the exact answer text"))
register_verifier(VerifierKind(
    "choice", _grade_choice, {"letters": "ABCD"}, _check_choice_reference,
    answer_format="one letter, e.g. 'The answer is (B)'", instruct=answers.AnswerLine("<letter>")))
register_verifier(VerifierKind(
    "numeric", _grade_numeric, {"rel_tol": 1e-6, "abs_tol": 0.0}, _check_numeric_reference,
    answer_format="a number, e.g. 'Answer: 3.14'", instruct=answers.AnswerLine("<number>")))
register_verifier(VerifierKind(
    "regex", _grade_regex, {"ignore_case": False}, _check_regex_reference,
    demonstrate=lambda ref: "", answer_format="text matching the expected pattern"))
