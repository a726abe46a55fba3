"""Whole-program tasks (environments.programs) and the HumanEval domain."""

import concurrent.futures
import time

import gymnasium
import pytest

import environments  # noqa: F401
from environments import programs, registry
from environments.families import humaneval
from environments.programs import assert_tests, grade_program, humaneval_tests, stdio_tests

# A few small MBPP-style tasks shipped as fixtures: (tests, right, wrong).
MBPP = {
    "add": (["assert add(1, 2) == 3", "assert 0 == add(-1, 1)", "assert add(a=2, b=2) == 4"],
            "def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
    "pairs": (["assert pairs([1, 2, 3]) == [(1, 2), (2, 3)]", "assert pairs([]) == []"],
              "def pairs(xs):\n    return list(zip(xs, xs[1:]))", "def pairs(xs):\n    return [list(p) for p in zip(xs, xs[1:])]"),
    "counts": (["assert counts('abca') == {'a': 2, 'b': 1, 'c': 1}", "assert counts('') == {}"],
               "def counts(s):\n    d = {}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d",
               "from collections import Counter\ndef counts(s):\n    return Counter(s)"),
    "even": (["assert is_even(4)", "assert not is_even(3)", "assert is_even(0) is True"],
             "def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return n % 2"),
    "area": (["assert math.isclose(area(1.0), 3.141592653589793, rel_tol=1e-6)", "assert abs(area(2) - 12.566) < 1e-2",
              "assert sorted(area_list([2, 1])) == [3.141592653589793, 12.566370614359172]"],
             "import math\ndef area(r):\n    return math.pi * r * r\ndef area_list(rs):\n    return {area(r) for r in rs}",
             "def area(r):\n    return 3 * r * r\ndef area_list(rs):\n    return [area(r) for r in rs]"),
}

# stdin -> stdout fixtures: (pairs, right, wrong)
STDIO = {
    "sum": ([("1 2\n", "3\n"), ("10 -4\n", "6"), ("0 0", "0\n\n")],
            "a, b = map(int, input().split())\nprint(a + b)",
            "a, b = map(int, input().split())\nprint(a * b)"),
    "lines": ([("3\nx\ny\nz\n", "z\ny\nx\n"), ("1\nq\n", "q")],
              "import sys\ndata = sys.stdin.read().split()\nn = int(data[0])\nsys.stdout.write('\\n'.join(reversed(data[1:n + 1])) + '\\n')\nsys.exit(0)",
              "import sys\ndata = open(0).read().split()\nprint(*data[1:])"),
}


@pytest.mark.parametrize("name", sorted(MBPP))
def test_mbpp_fixtures(name):
    asserts, right, wrong = MBPP[name]
    tests = assert_tests(asserts)
    assert tests.form == "asserts"
    grade = grade_program(right, tests)
    assert (grade.verdict.value, grade.reward) == ("PASS", 1.0), grade
    grade = grade_program(wrong, tests)
    assert grade.verdict.value in ("FAIL", "ERROR") and grade.reward == 0.0, grade
    assert "test `assert" in grade.feedback and len(grade.feedback) <= programs.FEEDBACK_CHARS


def test_feedback_names_input_expected_and_actual():
    grade = grade_program("def add(a, b):\n    return a - b", assert_tests(MBPP["add"][0]))
    assert grade.verdict.value == "FAIL"
    assert grade.feedback == "test `assert add(1, 2) == 3` failed: add(1, 2) returned -1, expected 3"
    grade = grade_program("def add(a, b):\n    return a // 0", assert_tests(MBPP["add"][0]))
    assert grade.verdict.value == "ERROR" and "ZeroDivisionError" in grade.feedback
    grade = grade_program("def add(a, b) return", assert_tests(MBPP["add"][0]))
    assert grade.verdict.value == "MALFORMED"
    grade = grade_program("def other(a, b):\n    return a + b", assert_tests(MBPP["add"][0]))
    assert grade.verdict.value == "ERROR" and "'add'" in grade.feedback


def test_type_exact_comparison():
    tests = assert_tests(["assert f(1) == 1", "assert f(2) == 2"])
    assert grade_program("def f(x):\n    return float(x)", tests).success  # 1.0 == 1, as in Python
    assert not grade_program("def f(x):\n    return True if x == 1 else 2", tests).success  # True is not 1
    tuples = assert_tests(["assert f() == (1, 2)"])
    assert not grade_program("def f():\n    return [1, 2]", tuples).success
    assert grade_program("def f():\n    return (1, 2)", tuples).success


@pytest.mark.parametrize(
    "bad",
    [
        "assert f(x) == 1",  # non-literal argument
        "assert f(1) == g(2)",  # computed expectation
        "assert isinstance(f(1), int)",
        "assert f(1) > 2",
        "for i in range(3): assert f(i) == i",
        "assert f(1) == 1; assert f(2) == 2",
        "assert len(f(1)) == 2",
    ],
)
def test_undecomposable_assert_refused_at_load(bad):
    with pytest.raises(ValueError) as err:
        assert_tests(["assert f(0) == 0", bad])
    assert repr(bad.strip()) in str(err.value) or "exactly one assert" in str(err.value)


# Candidates that try to pass without computing the answer (expected: f(3) == 10).
CHEATS = {
    "always_equal": "class E:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\ndef f(x):\n    return E()",
    "int_subclass": "class I(int):\n    def __eq__(self, o): return True\ndef f(x):\n    return I(7)",
    "exit0_at_load": "import sys\nsys.exit(0)\ndef f(x): return 0",
    "exit0_in_call": "import sys\ndef f(x):\n    sys.exit(0)",
    "os_exit": "import os\ndef f(x):\n    print('PASS'); os._exit(0)",
    "print_pass": "def f(x):\n    print('PASS'); print('all tests passed')\n    return None",
    "patch_builtins": "import builtins\nbuiltins.AssertionError = type('A', (Exception,), {})\nbuiltins.isinstance = lambda *a: True\ndef f(x): return 0",
    "read_frames": (
        "import sys\n"
        "def f(x):\n"
        "    fr = sys._getframe(1)\n"
        "    while fr is not None:\n"
        "        for v in list(fr.f_locals.values()):\n"
        "            if type(v) is int and v == 10: return v\n"
        "        fr = fr.f_back\n"
        "    return -1"
    ),
    # Forges the harness's nonce-tagged result frame (works against the "check" fallback, see
    # environments.programs; here it can only claim values, and it does not know the expected ones).
    "forge_result_frame": (
        "import sys, os, json, struct\n"
        "def f(x):\n"
        "    fr, nonce = sys._getframe(), None\n"
        "    while fr is not None:\n"
        "        nonce = fr.f_locals.get('nonce', nonce) if isinstance(fr.f_locals.get('nonce'), str) else nonce\n"
        "        fr = fr.f_back\n"
        "    inner = json.dumps({'phase': 'done', 'passed': True, 'results': [{'ok': 0}, {'ok': 0}]})\n"
        "    body = json.dumps({'phase': 'done', 'results': [{'ok': [inner]}], 'nonce': nonce}).encode()\n"
        "    os.write(3, struct.pack('>I', len(body)) + body)\n"
        "    os._exit(0)"
    ),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_earn_nothing_on_decomposed_asserts(name):
    tests = assert_tests(["assert f(3) == 10", "assert f(4) == 13"])
    grade = grade_program(CHEATS[name], tests)
    assert grade.reward == 0.0 and not grade.success and not grade.infra_error, grade


def test_cheats_earn_nothing_on_check_fallback():
    test = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == 3 * x + 1\n"
    tests = humaneval_tests(test, "f")
    assert tests.form == "check"
    assert grade_program("def f(x):\n    return 3 * x + 1", tests).success
    for name in ("always_equal", "int_subclass", "exit0_at_load", "exit0_in_call", "os_exit", "print_pass"):
        grade = grade_program(CHEATS[name], tests)
        assert grade.reward == 0.0 and not grade.infra_error, (name, grade)
    grade = grade_program("def f(x):\n    return 3 * x", tests)
    assert grade.verdict.value == "FAIL" and "assert candidate(x) == 3 * x + 1" in grade.feedback


def test_check_with_a_reference_is_replayed_and_cheats_earn_nothing():
    """A check() with a loop is recorded once against the reference on the host;
    grading runs only the recorded calls in the sandbox and check() on the host,
    so even a forged result frame (which beats the in-sandbox fallback) earns 0."""
    test = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == 3 * x + 1\n"
    tests = humaneval_tests(test, "f", reference="def f(x):\n    return 3 * x + 1")
    assert tests.form == "replay" and len(tests.replay) == 3
    assert grade_program("def f(x):\n    return 3 * x + 1", tests).success
    for name in sorted(CHEATS):
        grade = grade_program(CHEATS[name], tests)
        assert grade.reward == 0.0 and not grade.infra_error, (name, grade)
    grade = grade_program("def f(x):\n    return 3 * x", tests)
    assert grade.verdict.value == "FAIL" and "assert candidate(x) == 3 * x + 1" in grade.feedback, grade
    grade = grade_program("def f(x):\n    raise KeyError(x)", tests)
    assert grade.verdict.value == "ERROR" and "f(0) raised KeyError" in grade.feedback, grade


def test_replay_refuses_a_reference_that_fails_and_falls_back_without_literals():
    test = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == 3 * x + 1\n"
    with pytest.raises(ValueError, match="reference solution of 'f' fails its own check"):
        humaneval_tests(test, "f", reference="def f(x):\n    return 0")
    # An argument with no literal form (an object) cannot be recorded: check() runs in the sandbox.
    test = "def check(candidate):\n    assert candidate(object()) is not None\n"
    assert humaneval_tests(test, "f", reference="def f(x):\n    return 1").form == "check"


@pytest.mark.parametrize("name", sorted(STDIO))
def test_stdio_fixtures(name):
    pairs, right, wrong = STDIO[name]
    tests = stdio_tests(pairs)
    grade = grade_program(right, tests)
    assert grade.success, grade
    grade = grade_program(wrong, tests)
    assert grade.verdict.value == "FAIL" and grade.feedback.startswith("test 1 failed: input"), grade


def test_stdio_errors_and_limits():
    tests = stdio_tests([("1 2\n", "3\n")], timeout_s=1.0)
    assert grade_program("raise ValueError('boom')", tests).verdict.value == "ERROR"
    assert grade_program("import sys\nprint(3)\nsys.exit(2)", tests).verdict.value == "ERROR"
    assert grade_program("while True: pass", tests).verdict.value == "TIMEOUT"
    assert grade_program("print(3", tests).verdict.value == "MALFORMED"
    assert grade_program("import os\nos.write(1, b'3\\n')", tests).success  # fd 1 is captured too


def test_timeout_and_memory_verdicts():
    tests = assert_tests(["assert f(1) == 1"], timeout_s=1.0)
    assert grade_program("def f(x):\n    while True: pass", tests).verdict.value == "TIMEOUT"
    assert grade_program("def f(x):\n    return [0] * (1 << 30)", tests).verdict.value == "OOM"


def _humaneval_tasks():
    return registry.domain(humaneval.DOMAIN_ID)._tasks


def _body_none(task):
    return task.prompt + "    return None\n"


def test_humaneval_canonical_pass_and_return_none_fail():
    domain = registry.domain(humaneval.DOMAIN_ID)
    tasks = _humaneval_tasks()
    assert len(tasks) == 164
    forms = [t.hidden[1].form for t in tasks]
    # Every problem gets the host-compared guarantee: 156 decompose, 8 are replayed.
    assert set(forms) == {"asserts", "replay"} and forms.count("replay") == 8, forms
    jobs = [(t, t.demonstration, True) for t in tasks] + [(t, _body_none(t), False) for t in tasks]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        grades = list(pool.map(lambda job: domain.grade(job[0], job[1]), jobs))
    elapsed = time.perf_counter() - start
    print(f"HumanEval: graded {len(jobs)} answers in {elapsed:.1f}s ({len(jobs) / elapsed:.1f} answers/s)")
    for (task, _, right), grade in zip(jobs, grades):
        assert not grade.infra_error, (task.key, grade)
        assert grade.success is right, (task.key, right, grade)


def test_humaneval_body_answers_and_env():
    task = _humaneval_tasks()[0]
    domain = registry.domain(humaneval.DOMAIN_ID)
    body = task.demonstration[len(task.prompt.strip()):].strip()  # the env strips the answer: first line loses its indent
    assert domain.grade(task, body).success
    env = gymnasium.make(humaneval.DOMAIN_ID, max_attempts=2)
    obs, info = env.reset(seed=3, options={"split": "eval"})
    assert obs == env.unwrapped.task.prompt and obs.isascii()
    obs, reward, terminated, truncated, step = env.step("return None")
    assert (reward, terminated, truncated, step["verdict"]) == (0.0, False, False, "FAIL")
    assert obs.endswith(humaneval.RETRY_CUE)
    _, reward, terminated, _, step = env.step(info["demonstration"])
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS")
    with pytest.raises(ValueError, match="no 'train' split"):
        env.reset(seed=0, options={"split": "train"})
