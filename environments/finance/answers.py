"""References and the grading of answers against them.

A `Reference` is one of:

* "number": a value in base units (`value`, a float) that its source states
  in `unit` ("" / thousand / million / billion / percent); graded by
  `numbers.matches` (FinQA's tolerance, TAT-QA's scales).
* "count": an integer, exact.
* "yesno": "yes" or "no" (FinQA's `greater`).
* "span": a text (a table cell, a phrase), compared after TAT-QA's
  normalisation; numbers as numbers.
* "spans": several items in any order (TAT-QA's multi-span; `value` is a
  tuple of "span" / "number" References): the answer is a JSON list, or items
  on separate lines or separated by ";", and must hold exactly the
  reference's items: an extra candidate fails.
* "fields": named references (`value` is a tuple of (name, Reference)); the
  answer is one JSON object with exactly those keys, each compared as its
  reference says. Extra or missing keys fail; with the keys right, a FAIL
  earns the share of fields that are right.

Malformed answers (not a number, not JSON) are MALFORMED with one line saying
what was expected.

The answer graded is the reply's final answer (`environments.answers`): for
a value, after its last "Answer:" line (or statement, or box), else the whole
reply; for "spans", the last fenced block, else the text after the last
statement, else the whole reply; for "fields", the JSON object of
`answers.final_json`. A reply giving several different answers ("Answer: 42"
then "Answer: 43", "42 or 43") is MALFORMED. `instruction(ref)` and
`demonstrate_instruct(ref)` are the instruct prompt style's answer format and
demonstration.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from environments import answers as final
from environments.finance.numbers import Number, SCALES, matches, normalise_text, parse_number, same_text
from environments.verdicts import Grade, failed, malformed, passed

KINDS = ("number", "count", "yesno", "span", "spans", "fields")
NUMBER_FORMAT = "one number such as 1234.5, -3.2%, $(15) or 4.1 million"


@dataclasses.dataclass(frozen=True)
class Reference:
    kind: str
    value: Any
    unit: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"reference kind {self.kind!r} is not one of {KINDS}")
        if self.unit not in SCALES:
            raise ValueError(f"reference unit {self.unit!r} is not one of {sorted(SCALES)}")

    @property
    def answer_format(self) -> str:
        if self.kind == "fields":
            return "a JSON object with the keys " + ", ".join(repr(n) for n, _ in self.value)
        return {"number": NUMBER_FORMAT, "count": "a whole number", "yesno": "yes or no",
                "span": "the text as the document writes it",
                "spans": 'a JSON list of the texts, e.g. ["a", "b"]'}[self.kind]


def show_number(value: float) -> str:
    """Shortest plain text for a value: 12 for 12.0, 0.14136, -1234.5."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}"


def demonstrate(ref: Reference) -> str:
    """One answer that PASSes, written as the source states it."""
    if ref.kind == "number":
        # In the unit the source states (a table's "in millions", TAT-QA's scale), which a bare number means.
        shown = show_number(round(ref.value / SCALES[ref.unit], 10))
        return f"{shown}%" if ref.unit == "percent" else shown
    if ref.kind == "count":
        return str(int(ref.value))
    if ref.kind in ("yesno", "span"):
        return str(ref.value)
    if ref.kind == "spans":
        return json.dumps([demonstrate(sub) for sub in ref.value], ensure_ascii=False)
    return json.dumps({name: _field_demo(sub) for name, sub in ref.value}, ensure_ascii=False)


def _field_demo(ref: Reference) -> Any:
    if ref.kind == "count" or (ref.kind == "number" and ref.unit != "percent"):
        value = round(ref.value / SCALES[ref.unit], 10)
        return int(value) if float(value).is_integer() else value
    return demonstrate(ref)


def _cut(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _number(ref: Reference, answer: str) -> Grade:
    got = parse_number(answer)
    if got is None:
        return malformed(f"expected {ref.answer_format}, got {_cut(answer)}")
    if matches(got, ref.value, ref.unit, exact=ref.kind == "count"):
        return passed()
    return failed("wrong value")


def _items(answer: str) -> list[str] | None:
    if answer.startswith("["):
        try:
            items = json.loads(answer)
        except json.JSONDecodeError:
            return None
        if not isinstance(items, list) or not all(isinstance(x, (str, int, float)) for x in items):
            return None
        return [str(x) for x in items]
    sep = "\n" if "\n" in answer else ";"
    return [x.strip() for x in answer.split(sep) if x.strip()]


def _spans(ref: Reference, answer: str) -> Grade:
    items = _items(answer)
    if items is None:
        return malformed(f"expected {ref.answer_format}, got {_cut(answer)}")
    want = list(ref.value)
    if len(items) != len(want):
        return failed(f"expected {len(want)} items, got {len(items)}")
    left = list(want)
    for item in items:
        hit = next((w for w in left if _field_ok(w, item)), None)
        if hit is None:
            return failed(f"{_cut(item)} is not one of the answers")
        left.remove(hit)
    return passed()


def _field_ok(ref: Reference, value: Any) -> bool:
    if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
        return False
    text = str(value).strip()
    if ref.kind in ("number", "count"):
        got = parse_number(text)
        return got is not None and matches(got, ref.value, ref.unit, exact=ref.kind == "count")
    return same_text(text, str(ref.value))


def _fields(ref: Reference, answer: str) -> Grade:
    try:
        got = json.loads(answer)
    except json.JSONDecodeError as e:
        return malformed(f"expected {ref.answer_format}; not JSON ({e.msg} at column {e.colno})")
    if not isinstance(got, dict):
        return malformed(f"expected {ref.answer_format}, got a JSON {type(got).__name__}")
    names = [n for n, _ in ref.value]
    extra, missing = sorted(set(got) - set(names)), [n for n in names if n not in got]
    if extra or missing:
        return failed(f"keys must be exactly {names}" + (f"; unexpected {extra}" if extra else "")
                      + (f"; missing {missing}" if missing else ""))
    wrong = [n for n, sub in ref.value if not _field_ok(sub, got[n])]
    if not wrong:
        return passed(f"all {len(names)} fields correct")
    return failed(f"wrong fields: {wrong}", reward=(len(names) - len(wrong)) / len(names) * 0.5)


_JSON_KINDS = {"spans": final.Fenced("json", "the JSON list"), "fields": final.Fenced("json", "the JSON object")}
_LINE = final.AnswerLine("<answer>")


def instruction(ref: Reference) -> str:
    """The instruct prompt style's answer format for `ref`, in words."""
    return (_JSON_KINDS.get(ref.kind) or _LINE).instruction()


def demonstrate_instruct(ref: Reference) -> str:
    """An instruct-style reply to `ref` that PASSes: the answer line, or the JSON in its fence."""
    return (_JSON_KINDS.get(ref.kind) or _LINE).demonstrate(demonstrate(ref))


def _final(ref: Reference, answer: str) -> str | Grade:
    """The reply's final answer for `ref`'s kind, or the MALFORMED grade of a reply giving several."""
    if ref.kind == "fields":
        found = final.final_json(answer)
        many = final.several(found)
        return malformed(f"expected {ref.answer_format}; {final.several_feedback(many)}") if many else found.text
    if ref.kind == "spans":
        found = final.final_block(answer)
        if found.source == "text" and final.STATEMENT_RE.search(answer):
            found = final.final_answer(answer, number_line=False)  # items on lines: the last is no answer alone
        many = final.several(found)
        return malformed(f"expected {ref.answer_format}; {final.several_feedback(many)}") if many else found.value
    found = final.final_answer(answer)
    problem = final.one_value(found, parse_number if ref.kind in ("number", "count") else normalise_text)
    return malformed(f"expected {ref.answer_format}; {problem}") if problem else found.value


def grade(ref: Reference, answer: str) -> Grade:
    """The grade of `answer` (stripped by the env) against `ref`."""
    if not answer:
        return malformed(f"empty answer; expected {ref.answer_format}")
    answer = _final(ref, answer)
    if isinstance(answer, Grade):
        return answer
    if not answer:
        return malformed(f"empty final answer; expected {ref.answer_format}")
    if ref.kind in ("number", "count"):
        return _number(ref, answer)
    if ref.kind == "yesno":
        word = answer.lower().rstrip(".")
        if word not in ("yes", "no"):
            return malformed(f"expected yes or no, got {_cut(answer)}")
        return passed() if word == ref.value else failed("wrong answer")
    if ref.kind == "span":
        if normalise_text(answer) == "":
            return malformed(f"expected {ref.answer_format}, got {_cut(answer)}")
        return passed() if same_text(answer, str(ref.value)) else failed("wrong answer")
    if ref.kind == "spans":
        return _spans(ref, answer)
    return _fields(ref, answer)


__all__ = ["KINDS", "Number", "Reference", "demonstrate", "demonstrate_instruct", "grade", "instruction", "show_number"]
