"""Turning sandbox results into verdicts.

The candidate's process only ever sees the inputs; expected values stay here,
in the host, and comparison is type-exact (True is not 1, 2.0 is not 2), so
neither a rigged `__eq__`, a printed "PASS", nor an exit status can earn
reward.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from environments.sandbox import JobResult, Status
from environments.verdicts import Grade, Verdict, failed, malformed, passed

# Relative tolerance for float results (integer results must match exactly).
FLOAT_RTOL = 1e-9


def same_value(got: Any, expected: Any) -> bool:
    """Type-exact structural equality of decoded JSON values."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, float):
        return math.isclose(got, expected, rel_tol=FLOAT_RTOL, abs_tol=FLOAT_RTOL)
    if isinstance(expected, list):
        return len(got) == len(expected) and all(same_value(g, e) for g, e in zip(got, expected))
    return got == expected


def _shown(value: Any) -> str:
    if isinstance(value, dict) and "opaque" in value:
        return str(value["opaque"])
    return repr(value)


def _process_failure(result: JobResult, timeout_s: float) -> Grade | None:
    """Grade for a job that did not produce results, or None if it did."""
    if result.status is Status.SANDBOX_ERROR:
        return Grade(Verdict.SANDBOX_ERROR, 0.0, f"sandbox failure: {result.detail}")
    if result.status is Status.TIMEOUT:
        return Grade(Verdict.TIMEOUT, 0.0, result.detail or f"time limit of {timeout_s:g}s exceeded")  # detail names the limit hit, CPU or wall-clock
    if result.status is Status.MEMORY:
        return Grade(Verdict.OOM, 0.0, result.detail or "memory limit exceeded")
    if result.status is Status.NO_RESULT:
        how = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
        return Grade(Verdict.ERROR, 0.0, f"program ended ({how}) without returning results: {result.detail}")
    return None


def _error_grade(error_type: str, message: str) -> Grade:
    if error_type == "MemoryError":
        return Grade(Verdict.OOM, 0.0, "memory limit exceeded")
    if error_type == "SyntaxError":
        return malformed(message)
    return Grade(Verdict.ERROR, 0.0, message)


def grade_calls(
    result: JobResult,
    calls: Sequence[tuple[Any, ...]],
    expected: Sequence[Any],
    *,
    entry: str,
    timeout_s: float,
) -> Grade:
    """PASS iff every call returned exactly its expected value.

    The first failing call (in `calls` order) decides between ERROR (it
    raised; feedback is the last traceback line) and FAIL (wrong value;
    feedback names input, expected and actual output).
    """
    grade = _process_failure(result, timeout_s)
    if grade is not None:
        return grade
    payload = result.result or {}
    if payload.get("phase") != "done":
        return _error_grade(payload.get("error_type", ""), payload.get("error", "program failed"))
    outputs = payload.get("results", [])
    if len(outputs) != len(calls):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    for args, want, out in zip(calls, expected, outputs):
        call = f"{entry}({', '.join(map(repr, args))})"
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, f"{call}: memory limit exceeded")
            return Grade(Verdict.ERROR, 0.0, f"{call} raised {out['error']}")
        if not same_value(out.get("ok"), want):
            return failed(f"{call}: expected {want!r}, got {_shown(out.get('ok'))}")
    return passed(f"all {len(calls)} tests passed")
