"""Verifier kinds for dataset domains: name -> grading function.

A verifier kind grades one answer against one reference string from the file:
`grade(answer_text, reference, options) -> Grade`. The answer has already been
stripped, length-checked and UTF-8-checked by the env. `options` is the kind's
defaults updated with the user's options (unknown option names are rejected
at registration). Built-in kinds:

* math: final-answer extraction (last \\boxed{...}, else an "answer:" /
  "the answer is" line, else the whole answer if it parses, else its last
  number) and value equivalence via sympy: integers, decimals, fractions,
  percentages (50% equals 0.5 and 50), thousands separators, "x=3" vs "3", and
  LaTeX such as \\frac{1}{2}, \\sqrt{2}, 2\\pi. Expressions are size-bounded
  before sympy sees them (length, digits per literal, node count, exponent
  size, no nested powers), so a hostile answer like 9**9**9 is refused
  instead of evaluated.
* exact: string equality after optional case and whitespace normalisation.
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
import math
import re
from typing import Any, Callable, Mapping

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
# Final-answer extraction (shared by math, numeric and regex).

_ANSWER_LINE_RE = re.compile(r"(?:final answer|the answer|answer)\s*(?:is|:|=)\s*:?\s*(.+)", re.IGNORECASE)
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?%?|-?\.\d+%?")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at text[start - 1] ('{'), or None if unbalanced."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last balanced \\boxed{...} (nested braces allowed), or None."""
    found = None
    for match in _BOXED_RE.finditer(text):
        content = _braced(text, match.end())
        if content is not None:
            found = content
    return found


def _clean(candidate: str) -> str:
    candidate = candidate.strip().strip("*").strip()
    if len(candidate) >= 2 and candidate[0] == candidate[-1] == "$":
        candidate = candidate[1:-1].strip()
    return candidate.rstrip(".").strip()


def answer_candidates(text: str) -> list[str]:
    """Final-answer candidates in priority order: the last \\boxed{}, then the
    text after the last "answer is"/"answer:" phrase (and its first number), then
    the whole text, then its last number."""
    out: list[str] = []
    boxed = last_boxed(text)
    if boxed is not None:
        return [_clean(boxed)]
    lines = [m for m in _ANSWER_LINE_RE.finditer(text)]
    if lines:
        after = _clean(lines[-1].group(1).splitlines()[0])
        out.append(after)
        first = _NUMBER_RE.search(after)
        if first:
            out.append(first.group(0))
        return out
    out.append(_clean(text))
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        out.append(numbers[-1])
    return out


# ----------------------------------------------------------------------------
# math: LaTeX-ish text -> bounded sympy expression.

MAX_EXPR_CHARS = 200
MAX_LITERAL_DIGITS = 40
MAX_NODES = 200
MAX_EXPONENT = 64

_THOUSANDS_RE = re.compile(r"(?<![\d.])\d{1,3}(?:,\d{3})+(?![\d])")
_LHS_RE = re.compile(r"^\s*[A-Za-z](?:_\w+|\w{0,2})?\s*=(?!=)")
_ALLOWED_RE = re.compile(r"^[0-9A-Za-z+\-*/().\s]*$")
_FUNCS = {"sqrt", "pi", "oo", "log", "ln", "sin", "cos", "tan", "exp"}
_LATEX_WORDS = {
    r"\pi": " pi ", r"\infty": " oo ", r"\cdot": "*", r"\times": "*", r"\div": "/",
    r"\ln": " ln ", r"\log": " log ", r"\sin": " sin ", r"\cos": " cos ", r"\tan": " tan ",
}
_DROP = (r"\left", r"\right", r"\!", r"\,", r"\;", r"\:", r"\ ", r"\displaystyle", "^\\circ", "^{\\circ}", r"\%")


def _latex_argument(s: str, i: int) -> tuple[str, int] | None:
    """The converted argument of a LaTeX command starting at s[i] (`{...}` or a
    single character, as in `\\frac12`) and the index after it; None if malformed."""
    if i < len(s) and s[i] == "{":
        inner = _braced(s, i + 1)
        if inner is None:
            return None
        i += len(inner) + 2
    elif i < len(s) and s[i].isalnum():
        inner, i = s[i], i + 1
    else:
        return None
    conv = _latex_to_text(inner)
    return None if conv is None else (conv, i)


def _latex_to_text(s: str) -> str | None:
    """LaTeX subset -> sympy-parsable text: \\frac, \\sqrt (incl. [n]), ^{}, \\pi, \\cdot...
    None when a command is unknown or braces are unbalanced."""
    out: list[str] = []
    i = 0
    while i < len(s):
        if s.startswith(("\\frac", "\\dfrac", "\\tfrac"), i):
            i = s.index("frac", i) + 4
            parts = []
            for _ in range(2):
                while i < len(s) and s[i] == " ":
                    i += 1
                arg = _latex_argument(s, i)
                if arg is None:
                    return None
                conv, i = arg
                parts.append(conv)
            out.append(f"(({parts[0]})/({parts[1]}))")
        elif s.startswith("\\sqrt", i):
            i += 5
            root = None
            if i < len(s) and s[i] == "[":
                end = s.find("]", i)
                if end < 0:
                    return None
                root = _latex_to_text(s[i + 1:end])
                i = end + 1
            arg = _latex_argument(s, i)
            if arg is None:
                return None
            conv, i = arg
            out.append(f"sqrt({conv})" if root is None else f"(({conv})**(1/({root})))")
        elif s[i] == "\\":
            word = re.match(r"\\[A-Za-z]+", s[i:])
            if word is None or word.group(0) not in _LATEX_WORDS:
                return None
            out.append(_LATEX_WORDS[word.group(0)])
            i += len(word.group(0))
        elif s[i] == "^":
            out.append("**")
            i += 1
        elif s[i] in "{[":
            out.append("(")
            i += 1
        elif s[i] in "}]":
            out.append(")")
            i += 1
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _normalise(text: str) -> tuple[str, bool] | None:
    """(sympy-parsable text, is_percent), or None if it cannot be a bounded expression."""
    s = text.strip()
    if not s or len(s) > MAX_EXPR_CHARS:
        return None
    s = _clean(s)
    for token in _DROP:
        s = s.replace(token, "")
    s = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", s).strip()
    lhs = _LHS_RE.match(s)
    if lhs:
        s = s[lhs.end():]
    percent = s.endswith("%")
    s = s.rstrip("%").strip()
    s = _THOUSANDS_RE.sub(lambda m: m.group(0).replace(",", ""), s)
    s = s.lstrip("$").rstrip("$").strip()
    if "," in s or "=" in s:
        return None
    converted = _latex_to_text(s)
    if converted is None or not _ALLOWED_RE.match(converted):
        return None
    if "__" in converted or re.search(r"\d{%d,}" % (MAX_LITERAL_DIGITS + 1), converted):
        return None
    if re.search(r"\d[eE][+-]?\d{3,}", converted):  # 1e999999: a huge float, slow to compare
        return None
    for name in re.findall(r"[A-Za-z]+", converted):
        if len(name) > 1 and name not in _FUNCS and not re.fullmatch(r"[0-9]*e", name):
            # Multi-letter words other than known functions: prose, not an expression.
            return None
    return (converted, percent) if converted.strip() else None


def _exponent(exp: Any) -> float | None:
    """Value of a power's exponent if it is built from number literals and
    + - * / only (e.g. 2, -1, 1/2, 0.5), else None."""
    import sympy

    if exp.free_symbols or exp.atoms(sympy.NumberSymbol, sympy.Function):
        return None
    if any(isinstance(n, sympy.Pow) and n.args[1] != -1 for n in sympy.preorder_traversal(exp)):
        return None
    try:
        return float(exp)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return None


def _bounded(expr: Any, budget: float = MAX_EXPONENT**2) -> bool:
    """True if `expr` is small enough to evaluate quickly: at most MAX_NODES nodes,
    and every power has an exponent built from integer literals whose size, times
    that of every enclosing power's exponent, is at most `budget` (so towers like
    9**9**9 or ((10**40)**64)**64 are refused before anything is computed)."""
    import sympy

    nodes = sum(1 for _ in zip(range(MAX_NODES + 1), sympy.preorder_traversal(expr)))
    if nodes > MAX_NODES:
        return False

    def ok(node: Any, room: float) -> bool:
        if isinstance(node, sympy.Pow):
            value = _exponent(node.args[1])
            if value is None or abs(value) > room:
                return False
            return ok(node.args[0], room / max(1.0, abs(value)))
        return all(ok(arg, room) for arg in node.args)

    return ok(expr, budget)


_SYMPY_GLOBALS = ("Symbol", "Integer", "Float", "Rational", "Mul", "Add", "Pow")


def to_sympy(text: str) -> tuple[Any, bool] | None:
    """(sympy expression, is_percent) for a bounded math answer, else None."""
    norm = _normalise(text)
    if norm is None:
        return None
    import sympy
    from sympy.parsing.sympy_parser import (
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    names = {n: getattr(sympy, n) for n in ("sqrt", "pi", "oo", "log", "sin", "cos", "tan", "exp")}
    names["ln"] = sympy.log
    source, percent = norm
    try:
        # evaluate=False: nothing is computed until _bounded has checked the tree.
        expr = parse_expr(
            source,
            local_dict=names,
            global_dict={"__builtins__": {}, **{n: getattr(sympy, n) for n in _SYMPY_GLOBALS}},
            transformations=standard_transformations + (implicit_multiplication_application,),
            evaluate=False,
        )
    except Exception:  # noqa: BLE001  (any parse failure means "not an expression")
        return None
    if not isinstance(expr, sympy.Basic) or not _bounded(expr):
        return None
    return expr, percent


def _values(parsed: tuple[Any, bool]) -> list[Any]:
    expr, percent = parsed
    return [expr / 100, expr] if percent else [expr]


def _close(a: Any, b: Any) -> bool:
    """Numeric equality at 30 digits, at three points if the expressions have symbols."""
    import sympy

    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    points = [{}] if not symbols else [dict(zip(symbols, p)) for p in ((0.37, 1.3, 2.9), (1.9, 0.61, 3.7), (2.3, 4.1, 0.83))]
    try:
        for point in points:
            sub = {s: point.get(s, 1.7) for s in symbols} if symbols else {}
            va = complex(sympy.N(a.subs(sub) if sub else a, 30))
            vb = complex(sympy.N(b.subs(sub) if sub else b, 30))
            if not (math.isfinite(abs(va)) and math.isfinite(abs(vb))):
                return False
            if abs(va - vb) > 1e-9 * max(1.0, abs(vb)):
                return False
        return True
    except Exception:  # noqa: BLE001  (zoo, nan, unevaluable: not equal)
        return False


def math_equal(answer: str, reference: str) -> bool:
    """True if the value of `answer` equals that of `reference` (see module docstring)."""
    ref = to_sympy(reference)
    got = to_sympy(answer)
    if ref is None or got is None:
        return _clean(answer) == _clean(reference)
    return any(_close(a, b) for a in _values(got) for b in _values(ref))


def _grade_math(answer: str, reference: str, options: Mapping[str, Any]) -> Grade:
    """The first answer candidate that parses as a value decides PASS/FAIL;
    MALFORMED when none does."""
    for candidate in answer_candidates(answer):
        if to_sympy(candidate) is not None or _clean(candidate) == _clean(reference):
            return passed() if math_equal(candidate, reference) else failed("wrong answer")
    return malformed("no final answer found; end with 'Answer: <value>' or \\boxed{<value>}")


def _check_math_reference(reference: str, options: Mapping[str, Any]) -> str | None:
    return None if to_sympy(reference) is not None else f"reference {reference[:40]!r} is not a math value the verifier can parse"


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
    return passed() if _exact_norm(answer, options) == _exact_norm(reference, options) else failed("wrong answer")


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
    answer_format="one letter, e.g. 'The answer is (B)'"))
register_verifier(VerifierKind(
    "numeric", _grade_numeric, {"rel_tol": 1e-6, "abs_tol": 0.0}, _check_numeric_reference,
    answer_format="a number, e.g. 'Answer: 3.14'"))
register_verifier(VerifierKind(
    "regex", _grade_regex, {"ignore_case": False}, _check_regex_reference,
    demonstrate=lambda ref: "", answer_format="text matching the expected pattern"))
