"""Grading whole programs: the model writes a function or a program, a task's tests run it.

    from environments.programs import assert_tests, grade_program
    tests = assert_tests(["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    grade_program("def add(a, b):\\n    return a + b", tests)   # Grade(PASS, 1.0, ...)

Three forms of tests, and what each guarantees:

* `assert_tests` (MBPP style: `assert f(1, 2) == 3`, `assert y == f(x)`,
  `assert f(x)`, `assert not f(x)`, `assert f(x) is None`,
  `assert math.isclose(f(x), y)`, `assert abs(f(x) - y) < tol`, with the call
  optionally inside builtins of APPLIED: `int(f(x)) == 35`,
  `sorted(f(x)) == [...]`, `round(f(x), 2) == 0.33`). Each assert is
  decomposed on the host, at load time: the call, with the builtins around it,
  runs in the sandbox (its arguments literals, or expressions over the names
  the task's trusted setup code binds, which runs after the program, as
  MBPP's test_setup_code did); the expected value (a literal) never leaves
  the host; the result comes back as plain tagged data (exact builtin types;
  a Counter, defaultdict or OrderedDict as the dict it is) that the host
  compares with Python's own == (floats within a tolerance). No candidate
  object exists on the host, so there is nothing whose __eq__ could lie: a
  rigged `__eq__`, patched asserts or builtins (the harness keeps its own),
  `sys.exit(0)`, printing "PASS" or reading the caller's frames earn nothing:
  the candidate must produce the expected value itself. An assert that does
  not decompose is refused with ValueError naming it and why.
* `humaneval_tests` (`def check(candidate): assert candidate(...) == ...`):
  decomposed the same way when every statement of check() is such an assert
  (156 of HumanEval's 164 problems), with the same guarantee. Otherwise
  (loops, computed expectations), given the task's trusted reference
  solution, check() runs once on the host against it to record the calls it
  makes (their arguments as literals); grading runs those calls in the
  sandbox and then check() on the host over the returned plain values (form
  "replay", the remaining 8 HumanEval problems): the same guarantee again.
  `import random` in check() gets a private generator seeded the same for
  the recording and every replay.
  Without a reference (or with arguments that have no literal form) check()
  itself runs in the sandbox, in the
  candidate's process: the candidate is loaded first, its entry point is
  wrapped so that every value it returns is encoded as it would cross to the
  host and rebuilt from that as exact builtin objects (a value of a type the
  encoding does not carry raises), and check() sees only the copies, with the
  task's trusted prelude (the prompt's helpers) run fresh for it. That stops
  rigged objects, sys.exit, printed verdicts and a patched `assert` in the
  candidate's own module, but not a candidate that deliberately attacks the
  harness in its own process (walking frames to forge the result frame,
  patching builtins check() uses): those grades trust the candidate not to
  be adversarial against the harness. `ProgramTests.form` says which applies.
* `stdio_tests` (competitive programming: input -> expected stdout): one
  sandboxed job per input; the program runs as `__main__` with the input on
  fd 0 / sys.stdin and fd 1 / sys.stdout redirected to a file in its work
  directory; the host compares the output, with trailing whitespace of each
  line and trailing blank lines ignored. Expected outputs never leave the
  host. `sys.exit(0)` (or `exit()`) after printing is a normal end;
  a nonzero exit status or an exception is ERROR.

Modules: ``forms`` (ProgramTests, Check, stdio_tests), ``asserts`` (splitting
asserts: assert_tests, humaneval_tests), ``replay`` (check() replayed on the
host), ``harness`` (the sandbox side, real modules shipped as source),
``values`` (decoding and comparing results), ``graders`` (one grader per
form, registered by name; grade_program).

Verdicts follow the code family (environments.grading): PASS with reward 1
iff every test passes, else reward 0 with FAIL (wrong value or output),
ERROR (raised, or ended without results), MALFORMED (SyntaxError), TIMEOUT,
OOM, or SANDBOX_ERROR (infrastructure; never the model's fault). Feedback
names the first failing test with its input, expected and actual value (or
the error's last line), cut to FEEDBACK_CHARS.
"""

from __future__ import annotations


from environments.programs.asserts import assert_tests, decompose, humaneval_tests
from environments.programs.forms import (DEFAULT_TIMEOUT_S, FEEDBACK_CHARS, Check, ProgramTests,
                                         Wrap, stdio_tests)
from environments.programs.graders import GRADERS, grade_program, register_grader
from environments.programs.harness.wire import APPLIED

__all__ = ["APPLIED", "Check", "DEFAULT_TIMEOUT_S", "FEEDBACK_CHARS", "GRADERS", "ProgramTests",
           "Wrap", "assert_tests", "decompose", "grade_program", "humaneval_tests",
           "register_grader", "stdio_tests"]
