"""Turning the results of a sandboxed `PythonJob`'s calls into a verdict (the
code family's grader).

The candidate's process only ever sees the inputs; expected values stay here,
in the host. Returned values cross as tagged plain data
(environments/sandbox/tagged.py) and are decoded here into exact builtin types
only; comparison is Python's == on that data (floats within FLOAT_RTOL), as
every grader of the package compares (`environments.programs.values.same`):
what `assert f(x) == want` accepts, so True equals 1 and 2.0 equals 2, but a
tuple is not a list. No candidate object reaches the comparison (any other
type arrives as an opaque placeholder, equal to nothing), so neither a rigged
`__eq__`, a printed "PASS", nor an exit status can earn reward.
"""

from __future__ import annotations

from typing import Any, Sequence

from environments.job_failures import error_grade, process_failure
from environments.programs.values import Malformed, cut, has_opaque, same, show, untag
from environments.sandbox import JobResult
from environments.verdicts import Grade, Verdict, failed, passed


def _call_grade(call: str, want: Any, out: Any) -> Grade | None:
    """The grade of one call's result `out` when it fails, else None."""
    if not isinstance(out, dict):
        return Grade(Verdict.ERROR, 0.0, "program returned malformed results")
    if "error" in out:
        if out.get("error_type") == "MemoryError":
            return Grade(Verdict.OOM, 0.0, f"{call}: memory limit exceeded")
        return Grade(Verdict.ERROR, 0.0, cut(f"{call} raised {out['error']}"))
    try:
        got = untag(out.get("ok"))
    except (Malformed, TypeError, ValueError, RecursionError) as e:
        return Grade(Verdict.ERROR, 0.0, cut(f"{call} returned a malformed value ({e})"))
    if has_opaque(got) or not same(got, want):
        return failed(cut(f"{call}: expected {show(want)}, got {show(got)}"))
    return None


def grade_calls(
    result: JobResult,
    calls: Sequence[tuple[Any, ...]],
    expected: Sequence[Any],
    *,
    entry: str,
    timeout_s: float,
) -> Grade:
    """PASS iff every call returned its expected value (`values.same`).

    The first failing call (in `calls` order) decides between ERROR (it
    raised; feedback is the last traceback line) and FAIL (wrong value;
    feedback names input, expected and actual output).
    """
    grade = process_failure(result, timeout_s)
    if grade is not None:
        return grade
    payload = result.result or {}
    if payload.get("phase") != "done":
        return error_grade(str(payload.get("error_type", "")), str(payload.get("error", "program failed")))
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(calls):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    for args, want, out in zip(calls, expected, outputs):
        grade = _call_grade(f"{entry}({', '.join(map(repr, args))})", want, out)
        if grade is not None:
            return grade
    return passed(f"all {len(calls)} tests passed")
