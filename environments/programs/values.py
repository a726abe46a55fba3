"""Results as the host reads them, for every grader of the package (the
program-test graders and the code family's `environments.grading.grade_calls`):
tagged plain data from the sandbox (environments/sandbox/tagged.py) decoded
into exact builtin types (``untag``; an object of any other type stays an
`Opaque` placeholder, never rebuilt), compared with Python's own == (floats
within a tolerance, ``same``), and shown in feedback (``show``, ``cut``)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from environments.programs.forms import FEEDBACK_CHARS

# Relative (and absolute) tolerance of `same` where a float is compared with a
# number (ints with ints, and everything else, compare exactly).
FLOAT_RTOL = 1e-9
# Candidate-side shown values in feedback are cut to this many characters.
SHOWN_CHARS = 120


class Malformed(Exception):
    pass


def untag(value: Any) -> Any:
    """Host objects (exact builtin types) from tagged data; opaque values stay _Opaque."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is not dict or len(value) != 1:
        raise Malformed(f"malformed result {value!r:.80}")
    (tag, body), = value.items()
    if tag == "opaque":
        return Opaque(str(body))
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [untag(x) for x in body]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {untag(k): untag(v) for k, v in body}
    if tag == "bytes":
        return bytes.fromhex(body)
    if tag == "complex":
        return complex(*body)
    raise Malformed(f"unknown tag {tag!r}")


@dataclasses.dataclass(frozen=True)
class Opaque:
    type_name: str

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


def same(got: Any, want: Any, rel_tol: float = FLOAT_RTOL, abs_tol: float = FLOAT_RTOL) -> bool:
    """Python's == on plain data decoded here (no candidate object is involved:
    `0 == False`, `1.0 == 1`, a returned Counter is a dict), and floats, also
    inside lists, tuples and dict values, within rel_tol/abs_tol (a sum taken in
    another order is still right)."""
    if got == want:
        return True
    if type(got) in (int, float) and type(want) in (int, float) and float in (type(got), type(want)):
        return math.isclose(got, want, rel_tol=rel_tol, abs_tol=abs_tol)
    if type(got) is type(want) and type(want) in (list, tuple):
        return len(got) == len(want) and all(same(g, w, rel_tol, abs_tol) for g, w in zip(got, want))
    if type(got) is dict and type(want) is dict:
        return got.keys() == want.keys() and all(same(got[k], want[k], rel_tol, abs_tol) for k in want)
    return False


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def cut(text: str) -> str:
    return text if len(text) <= FEEDBACK_CHARS else text[: FEEDBACK_CHARS - 3] + "..."


def has_opaque(value: Any) -> bool:
    if isinstance(value, Opaque):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(has_opaque(x) for x in value)
    if isinstance(value, dict):
        return any(has_opaque(k) or has_opaque(v) for k, v in value.items())
    return False
