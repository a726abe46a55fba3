"""Numbers as financial documents and answers write them, and their comparison.

`parse_number` reads one number written the ways reports write it: "$1,234.5",
"(1,234)" (a negative), "-12.5%", "3.2 million", "$(15)". It returns None for
anything else, including text holding two numbers ("12 or 13"): an answer
that lists candidates is not a number.

`matches` compares an answer with a reference value in *base units* (a
percentage as its ratio, "3.2 million" as 3.2e6). An answer that names its
unit ("%", "million") is read in that unit; a bare number may be given in the
reference's own unit (the table's "in millions", TAT-QA's scale) or in base
units. Tolerance: the answer must be the reference rounded to the digits the
answer writes (within half a unit of its last digit: 14.1% for 0.14136, but
not 2018 for 2019), and that rounding may not be coarser than 0.5% of the
reference (14% for 0.14136 fails); FinQA's evaluate.py rounds executed results
to 5 decimals, so an absolute 5e-6 in base units is always allowed. A count
must be exact.
"""

from __future__ import annotations

import dataclasses
import re
import string

ABS_TOL = 5e-6   # FinQA: results compared after round(x, 5)
REL_TOL = 5e-3
SCALES = {"": 1.0, "thousand": 1e3, "million": 1e6, "billion": 1e9, "percent": 1e-2}
_SCALE_WORDS = {"thousand": "thousand", "thousands": "thousand", "k": "thousand", "million": "million",
                "millions": "million", "m": "million", "mn": "million", "mm": "million", "billion": "billion",
                "billions": "billion", "bn": "billion", "b": "billion", "percent": "percent", "%": "percent"}
_NUMBER_RE = re.compile(
    r"(?P<sign>[-+\u2212])?\s*(?P<cur>[$\u20ac\u00a3])?\s*(?P<open>\()?\s*(?P<sign2>[-+\u2212])?\s*"
    r"(?P<cur2>[$\u20ac\u00a3])?\s*(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)\s*"
    r"(?P<pct>%)?\s*(?P<close>\))?\s*(?P<unit>[a-z%]+)?")


@dataclasses.dataclass(frozen=True)
class Number:
    """A parsed number: `value` as written (sign applied), and the unit it names
    ("" when none; else a key of SCALES)."""

    value: float
    unit: str = ""
    decimals: int = 0  # digits written after the decimal point

    @property
    def half_unit(self) -> float:
        """Half a unit of the last written digit, in the number's own unit."""
        return 0.5 * 10.0 ** -self.decimals

    @property
    def base(self) -> float:
        return self.value * SCALES[self.unit]


def parse_number(text: str) -> Number | None:
    """The one number `text` writes, or None. See the module doc for the forms."""
    # White space as single spaces: the pattern's neighbouring \s* would try
    # every split of a long run (a reply of 5,000 spaces did not finish).
    s = " ".join(text.split()).lower().rstrip(".").strip()
    m = _NUMBER_RE.fullmatch(s)
    if m is None or bool(m["open"]) != bool(m["close"]):
        return None
    if sum(bool(m[k]) for k in ("sign", "sign2", "open")) > 1 or (m["cur"] and m["cur2"]):
        return None
    unit = ""
    if m["unit"] is not None:
        if m["pct"] or m["unit"] not in _SCALE_WORDS:
            return None
        unit = _SCALE_WORDS[m["unit"]]
    elif m["pct"]:
        unit = "percent"
    value = float(m["num"].replace(",", ""))
    negative = m["open"] or (m["sign"] or m["sign2"] or "+") in "-\u2212"
    _, dot, frac = m["num"].partition(".")
    return Number(-value if negative else value, unit, len(frac) if dot else 0)


def candidates(answer: Number, reference_unit: str) -> tuple[tuple[float, float], ...]:
    """(base-unit value, half a unit of its last digit) for each thing `answer`
    may mean: as its unit says, or, when it names none, in the reference's
    unit or already in base units."""
    units = (answer.unit,) if answer.unit else tuple(dict.fromkeys((reference_unit, "")))
    return tuple((answer.value * SCALES[u], answer.half_unit * SCALES[u]) for u in units)


def close(got: float, want: float, half_unit: float = 0.0) -> bool:
    """`got`, written to within `half_unit`, is `want` rounded (see the module doc)."""
    diff = abs(got - want)
    return diff <= max(ABS_TOL, half_unit) and diff <= max(ABS_TOL, REL_TOL * abs(want))


def matches(answer: Number, want_base: float, reference_unit: str = "", exact: bool = False) -> bool:
    """True if `answer` equals `want_base` (a reference in base units, given in
    `reference_unit` by its source) within the tolerance of the module doc."""
    if reference_unit not in SCALES:
        raise ValueError(f"reference unit {reference_unit!r} is not one of {sorted(SCALES)}")
    if exact:
        want = want_base / SCALES[reference_unit]
        return answer.unit in ("", reference_unit) and answer.value == want
    return any(close(value, want_base, half) for value, half in candidates(answer, reference_unit))


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(f"[{re.escape(string.punctuation)}\u2013\u2014\u2019]")


def normalise_text(text: str) -> str:
    """TAT-QA's answer normalisation: lower case, no punctuation or articles,
    single spaces (a number alone is written canonically: "1,234.0" -> "1234")."""
    number = parse_number(text)
    if number is not None and number.unit in ("", "percent"):
        return f"{number.value:g}" + ("%" if number.unit else "")
    return " ".join(_ARTICLES.sub(" ", _PUNCT.sub(" ", text.lower())).split())


def same_text(got: str, want: str) -> bool:
    """Equal after normalisation; two numbers are compared as numbers."""
    a, b = parse_number(got), parse_number(want)
    if a is not None and b is not None:
        return a.unit == b.unit and close(a.value, b.value, a.half_unit)
    return normalise_text(got) == normalise_text(want)
