"""The `code` verifier kind: a dataset row's answer field holds unit tests.

The reference (the mapped answer field) is one of:

* a list of MBPP-style assert strings: ["assert add(1, 2) == 3", ...];
* a string of newline-separated assert statements;
* a HumanEval-style test string defining `check(candidate)`; the function's
  name comes from the row's entry_point field (fields={"entry_point": col})
  or the `entry_point` option;
* a list of {"input": "...", "output": "..."} objects (stdin -> stdout).

A row's test_imports and test_setup_code fields (MBPP's columns of those
names, read by default) are run in the sandbox after the program and before
assert tests, in the program's namespace, as MBPP's harness did; the tests'
arguments may use the names they bind (the expected values stay literals,
kept on the host).

Tests are parsed into `environments.programs.ProgramTests` once per row at
registration (an assert that cannot be decomposed, a check() without an entry
point or a malformed pair is a load-time ValueError naming file, row and
field) and cached as the task's hidden data. The answer (a whole program or
function: the reply's last fenced block, else the whole reply,
`environments.answers.final_block`; a reply with several different blocks is
MALFORMED) is graded by
`environments.programs.grade_program` in the sandbox: PASS iff every test
passes; sandbox infrastructure failures are SANDBOX_ERROR, never FAIL.

Options: timeout_s (per job; None: 5 s for asserts/check, 2 s per stdio
input), entry_point (default function name for check(candidate) tests).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Mapping

from environments import answers
from environments.datasets.verifiers import VerifierKind, register_verifier
from environments.programs import ProgramTests, assert_tests, grade_program, humaneval_tests, stdio_tests
from environments.verdicts import Grade, malformed

MAX_ANSWER_CHARS = 6000  # as the HumanEval domain


def _timeout(options: Mapping[str, Any], default: float) -> float:
    value = options.get("timeout_s")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
        raise ValueError(f"option timeout_s must be a number of seconds in (0, 600], got {value!r}")
    return float(value)


def _asserts_of_text(text: str) -> list[str]:
    try:
        module = ast.parse(text)
    except SyntaxError as e:
        raise ValueError(f"the tests are not valid Python: {e.msg} (line {e.lineno})") from None
    out = []
    for node in module.body:
        if not isinstance(node, ast.Assert):
            raise ValueError(f"line {node.lineno}: expected only assert statements (or a check(candidate) "
                             f"function), got {type(node).__name__}")
        out.append(ast.get_source_segment(text, node) or "")
    return out


def _pairs(items: list[Any]) -> list[tuple[str, str]]:
    pairs = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict) or set(item) != {"input", "output"}:
            got = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise ValueError(f"stdio test {i} must be an object with exactly the keys 'input' and 'output', got {got}")
        for key in ("input", "output"):
            if not isinstance(item[key], str):
                raise ValueError(f"stdio test {i}: {key!r} must be a string, got {type(item[key]).__name__}")
        pairs.append((item["input"], item["output"]))
    return pairs


def test_setup(test_imports: str | None, test_setup_code: str | None) -> str:
    """The code run before a row's assert tests: its imports, then its setup code."""
    return "\n".join(part.replace("\r\n", "\n") for part in (test_imports, test_setup_code) if part and part.strip())


def parse_tests(reference: str, entry_point: str | None = None, options: Mapping[str, Any] | None = None,
                setup: str = "") -> ProgramTests:
    """ProgramTests of one reference (see the module docstring); ValueError if unusable.

    setup: code run in the sandbox after the program and before assert tests
    (`test_setup`); other forms of tests refuse it."""
    options = options or {}
    entry_point = entry_point or options.get("entry_point") or None
    text = reference.strip()
    data: Any = text
    if text.startswith(("[", "{")):
        try:
            data = json.loads(text)
        except ValueError:
            data = text
    if isinstance(data, dict):
        raise ValueError("the tests must be a list (of assert strings or of {'input', 'output'} objects) or a "
                         "string, got an object")
    if isinstance(data, list):
        if not data:
            raise ValueError("a code task needs at least one test")
        if all(isinstance(x, str) for x in data):
            return assert_tests(data, setup=setup, timeout_s=_timeout(options, 5.0))
        if all(isinstance(x, dict) for x in data):
            _no_setup(setup, "stdin/stdout tests")
            return stdio_tests(_pairs(data), timeout_s=_timeout(options, 2.0))
        raise ValueError("the tests must be a list of assert strings or a list of {'input', 'output'} objects, "
                         "not a mix")
    if re.search(r"^def\s+check\s*\(", text, re.MULTILINE):
        if not entry_point:
            raise ValueError("a check(candidate) test needs the function's name: map a column with "
                             "fields={'entry_point': ...} or pass options={'entry_point': ...}")
        if not entry_point.isidentifier():
            raise ValueError(f"entry_point {entry_point!r} is not a Python identifier")
        _no_setup(setup, "a check(candidate) test")
        return humaneval_tests(text, entry_point, timeout_s=_timeout(options, 5.0))
    return assert_tests(_asserts_of_text(text), setup=setup, timeout_s=_timeout(options, 5.0))


def _no_setup(setup: str, form: str) -> None:
    if setup:
        raise ValueError(f"test_setup_code / test_imports are run before assert tests; {form} has no place for "
                         f"them (got {setup[:60]!r})")


def _prepare(reference: str, row: Any, options: Mapping[str, Any]) -> ProgramTests:
    setup = test_setup(getattr(row, "test_imports", None), getattr(row, "test_setup_code", None))
    return parse_tests(reference, getattr(row, "entry_point", None), options, setup)


def program_text(answer: str) -> str | Grade:
    """The program of an answer: its last fenced block (```python ...```), else
    the whole answer; MALFORMED when it holds several different blocks."""
    found = answers.final_block(answer)
    many = answers.several(found)
    return malformed(answers.several_feedback(many, "fenced blocks")) if many else found.text


def _grade_code(answer: str, tests: Any, options: Mapping[str, Any]) -> Grade:
    if not isinstance(tests, ProgramTests):  # a bare reference string (not prepared at load)
        tests = parse_tests(str(tests), None, options)
    program = program_text(answer)
    return program if isinstance(program, Grade) else grade_program(program, tests)


def _check_options(reference: str, options: Mapping[str, Any]) -> str | None:
    try:
        _timeout(options, 1.0)
    except ValueError as e:
        return str(e)
    return None


CODE = register_verifier(VerifierKind(
    "code", _grade_code, {"timeout_s": None, "entry_point": ""}, _check_options,
    demonstrate=lambda ref: "",
    answer_format="a complete Python program or function (optionally in one ```python fence)",
    prepare=_prepare, structured_reference=True, tags=("sandbox", "python", "program"),
    max_answer_chars=MAX_ANSWER_CHARS, instruct=answers.Fenced("python", "the complete program")))
