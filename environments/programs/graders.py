"""Grading a program against its tests, one grader per test form, registered
by name (``GRADERS``; ``register_grader(form)``): the harness runs in the
sandbox, the verdict is decided here on plain data."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Sequence

from environments import sandbox
from environments.job_failures import error_grade, process_failure
from environments.programs import harness
from environments.programs.forms import ProgramTests, Wrap
from environments.programs.replay import call_sources, run_check
from environments.programs.values import Malformed, Opaque, cut, has_opaque, same, show, untag
from environments.verdicts import Grade, Verdict, failed, passed

# form -> grade(answer, tests) -> Grade
GRADERS: dict[str, Callable[[str, ProgramTests], Grade]] = {}


def register_grader(form: str):
    """Registers ``fn(answer, tests) -> Grade`` as the grader of test form ``form``."""
    def deco(fn):
        if form in GRADERS:
            raise ValueError(f"a grader of test form {form!r} is already registered")
        GRADERS[form] = fn
        return fn
    return deco


def grade_program(answer: str, tests: ProgramTests) -> Grade:
    """Grades the program `answer` (full source text) against `tests`. Thread-safe."""
    grader = GRADERS.get(tests.form)
    if grader is None:
        raise ValueError(f"unknown test form {tests.form!r}; graders: {sorted(GRADERS)}")
    return grader(answer, tests)


def _payload(result: sandbox.JobResult, timeout_s: float) -> dict[str, Any] | Grade:
    grade = process_failure(result, timeout_s)
    if grade is not None:
        return grade
    outer = result.result or {}
    if outer.get("phase") != "done":  # the harness itself failed to load: not expected
        return error_grade(outer.get("error_type", ""), outer.get("error", "program failed"))
    try:  # the harness's one return value: its JSON text in str chunks, tagged by the worker
        (chunks,) = [untag(r["ok"]) for r in outer.get("results", [])]
        payload = json.loads("".join(chunks))
    except (KeyError, TypeError, ValueError, Malformed, RecursionError):
        return Grade(Verdict.ERROR, 0.0, "program did not return results")
    if not isinstance(payload, dict):
        return Grade(Verdict.ERROR, 0.0, "program did not return results")
    if payload.get("phase") != "done":
        return error_grade(str(payload.get("error_type", "")), str(payload.get("error", "program failed")))
    return payload


def _job(source: str, call: tuple[Any, ...], tests: ProgramTests, files: dict[str, str] | None = None) -> sandbox.PythonJob:
    return sandbox.PythonJob(source=source, entry="_rlpt_main", calls=(call,), timeout_s=tests.timeout_s, limits=tests.limits, files=files or {}, output_limit=256)


def _wire(function: str, args: Sequence[str], kwargs: Sequence[tuple[str, str]], wrap: Sequence[Wrap] = ()) -> list[Any]:
    """One call as the calls harness reads it: [function, args, kwargs, wrappers]."""
    return [function, list(args), [list(kv) for kv in kwargs], [[n, list(e), [list(kv) for kv in k]] for n, e, k in wrap]]


@register_grader("asserts")
def _grade_checks(answer: str, tests: ProgramTests) -> Grade:
    calls = [_wire(c.function, c.args, c.kwargs, c.wrap) for c in tests.checks]
    job = _job(harness.source("calls"), (answer, tests.setup, calls), tests)
    payload = _payload(sandbox.run(job), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(tests.checks):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    for check, out in zip(tests.checks, outputs):
        if not isinstance(out, dict):
            return Grade(Verdict.ERROR, 0.0, "program returned malformed results")
        shown = check.applied
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, cut(f"{shown}: memory limit exceeded"))
            return Grade(Verdict.ERROR, 0.0, cut(f"test `{check.source}` failed: {shown} raised {out['error']}"))
        try:
            got = untag(out.get("ok"))
        except (Malformed, TypeError, ValueError, RecursionError) as e:
            return Grade(Verdict.ERROR, 0.0, f"{shown} returned a malformed value ({e})")
        if isinstance(got, Opaque) or has_opaque(got):
            return failed(cut(f"test `{check.source}` failed: {shown} returned {show(got)}, not plain data"))
        if check.kind == "eq":
            ok = same(got, check.expected)
        elif check.kind == "is":
            ok = got is check.expected
        elif check.kind == "close":
            ok = type(got) in (bool, int, float) and math.isclose(got, check.expected, rel_tol=check.rel_tol, abs_tol=check.abs_tol)
        else:  # bool() was applied in the sandbox
            ok = got is (check.kind == "truthy")
        if not ok:
            if check.kind in ("truthy", "falsy"):
                return failed(cut(f"test `{check.source}` failed: {shown} returned a {'false' if check.kind == 'truthy' else 'true'} value"))
            want = show(check.expected) if check.kind in ("eq", "is") else f"{check.expected!r} (within tolerance)"
            return failed(cut(f"test `{check.source}` failed: {shown} returned {show(got)}, expected {want}"))
    return passed(f"all {len(tests.checks)} tests passed")


@register_grader("check")
def _grade_check_function(answer: str, tests: ProgramTests) -> Grade:
    job = _job(harness.source("check"), (answer, tests.entry, tests.prelude, tests.check_source), tests)
    payload = _payload(sandbox.run(job), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    if payload.get("passed") is True:
        return passed("check() passed")
    line = payload.get("line")
    lines = tests.check_source.splitlines()
    where = f" at `{lines[line - 1].strip()}`" if isinstance(line, int) and 0 < line <= len(lines) else ""
    error = str(payload.get("error", "check() failed"))
    if payload.get("error_type") == "MemoryError":
        return Grade(Verdict.OOM, 0.0, "memory limit exceeded")
    verdict = Verdict.FAIL if payload.get("error_type") == "AssertionError" else Verdict.ERROR
    return Grade(verdict, 0.0, cut(f"check(candidate) failed{where}: {error}"))


class _Replay(Exception):
    """Ends a replayed check(): `grade` is the candidate's verdict."""

    def __init__(self, grade: Grade) -> None:
        super().__init__(grade.feedback)
        self.grade = grade


def _test_line(e: BaseException, source: str) -> str:
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test>":
            line = tb.tb_lineno
        tb = tb.tb_next
    lines = source.splitlines()
    return f" at `{lines[line - 1].strip()}`" if line is not None and 0 < line <= len(lines) else ""


@register_grader("replay")
def _grade_replay(answer: str, tests: ProgramTests) -> Grade:
    """check() runs here, on the host, over values the candidate computed in the
    sandbox for the calls recorded from the reference run: the candidate's
    process only ever returns plain data, as for decomposed asserts."""
    calls = [_wire(tests.entry, args, named) for args, named in tests.replay]
    payload = _payload(sandbox.run(_job(harness.source("calls"), (answer, "", calls), tests)), tests.timeout_s)
    if isinstance(payload, Grade):
        return payload
    outputs = payload.get("results")
    if not isinstance(outputs, list) or len(outputs) != len(calls):
        return Grade(Verdict.ERROR, 0.0, "program returned the wrong number of results")
    pending = list(zip(tests.replay, outputs))

    def replayed(*args, **kwargs):
        shown = f"{tests.entry}({', '.join([repr(a) for a in args] + [f'{k}={v!r}' for k, v in kwargs.items()])})"
        if not pending or call_sources(args, kwargs) != pending[0][0]:
            raise _Replay(failed(cut(f"check() called {cut(shown)} after results that differ from the reference "
                                      f"solution's, so it cannot be graded from the recorded calls")))
        _, out = pending.pop(0)
        if not isinstance(out, dict):
            raise _Replay(Grade(Verdict.ERROR, 0.0, "program returned malformed results"))
        if "error" in out:
            if out.get("error_type") == "MemoryError":
                raise _Replay(Grade(Verdict.OOM, 0.0, cut(f"{shown}: memory limit exceeded")))
            raise _Replay(Grade(Verdict.ERROR, 0.0, cut(f"{shown} raised {out['error']}")))
        try:
            got = untag(out.get("ok"))
        except (Malformed, TypeError, ValueError, RecursionError) as e:
            raise _Replay(Grade(Verdict.ERROR, 0.0, f"{shown} returned a malformed value ({e})")) from None
        if has_opaque(got):
            raise _Replay(failed(cut(f"{shown} returned {show(got)}, not plain data")))
        return got

    try:
        run_check(tests.check_source, tests.entry, tests.prelude, replayed)
    except _Replay as e:
        return e.grade
    except AssertionError as e:
        return failed(cut(f"check(candidate) failed{_test_line(e, tests.check_source)}"))
    except Exception as e:  # check() itself choked on a returned value (e.g. len(None))
        return Grade(Verdict.ERROR, 0.0, cut(f"check(candidate) failed{_test_line(e, tests.check_source)}: {type(e).__name__}: {e}"))
    if pending:
        return failed("check() made fewer calls than with the reference solution: its results steered it elsewhere")
    return passed(f"check() passed ({len(calls)} calls)")


def _normal_output(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@register_grader("stdio")
def _grade_stdio(answer: str, tests: ProgramTests) -> Grade:
    for index, (given, want) in enumerate(tests.io_pairs, 1):
        job = _job(harness.source("stdio"), (answer,), tests, files={"input.txt": given})
        payload = _payload(sandbox.run(job), tests.timeout_s)
        if isinstance(payload, Grade):
            return Grade(payload.verdict, 0.0, cut(f"test {index} (input {given!r:.80}): {payload.feedback}"))
        if "error" in payload:
            if payload.get("error_type") == "MemoryError":
                return Grade(Verdict.OOM, 0.0, f"test {index}: memory limit exceeded")
            return Grade(Verdict.ERROR, 0.0, cut(f"test {index} (input {given!r:.80}): {payload['error']}"))
        got = str(payload.get("stdout", ""))
        if _normal_output(got) != _normal_output(want):
            return failed(cut(f"test {index} failed: input {given!r:.100}, expected output {want!r:.100}, got {got!r:.100}"))
    return passed(f"all {len(tests.io_pairs)} tests passed")
