"""Grades of sandbox jobs that returned no values to compare: the job ended
early (time or memory limit, no result, a sandbox failure) or the program
failed before its calls (SyntaxError, an exception while loading). Shared by
the code family's `environments.grading.grade_calls` and the program-test
graders (`environments.programs.graders`), which both decide the rest from
returned values."""

from __future__ import annotations

from environments.sandbox import JobResult, Status
from environments.verdicts import Grade, Verdict, malformed


def process_failure(result: JobResult, timeout_s: float) -> Grade | None:
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


def error_grade(error_type: str, message: str) -> Grade:
    """Grade for a program that raised `error_type` (its last traceback line: `message`)."""
    if error_type == "MemoryError":
        return Grade(Verdict.OOM, 0.0, "memory limit exceeded")
    if error_type == "SyntaxError":
        return malformed(message)
    return Grade(Verdict.ERROR, 0.0, message)
