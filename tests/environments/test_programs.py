"""Whole-program tasks (environments.programs) and the HumanEval domain."""

import concurrent.futures
import re
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
               "from collections import Counter\ndef counts(s):\n    return Counter(s.upper())"),
    "even": (["assert is_even(4)", "assert not is_even(3)", "assert is_even(0) is True"],
             "def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return n % 2"),
    "area": (["assert math.isclose(area(1.0), 3.141592653589793, rel_tol=1e-6)", "assert abs(area(2) - 12.566) < 1e-2",
              "assert sorted(area_list([2, 1])) == [3.141592653589793, 12.566370614359172]"],
             "import math\ndef area(r):\n    return math.pi * r * r\ndef area_list(rs):\n    return {area(r) for r in rs}",
             "def area(r):\n    return 3 * r * r\ndef area_list(rs):\n    return [area(r) for r in rs]"),
    # A builtin around the call runs in the sandbox on what the program returned (a float, a
    # generator, a dict view), and the host compares its plain result.
    "wrapped": (["assert int(lobb(5, 3)) == 35", "assert sorted(uniq([3, 1, 3])) == [1, 3]", "assert len(uniq('aab')) == 2",
                 "assert set(uniq('aab')) == {'a', 'b'}", "assert round(mean([1, 2, 2]), 2) == 1.67",
                 "assert list(keys({'a': 1})) == ['a']", "assert str(lobb(1, 1)) == '2.0'", "assert abs(lobb(-1, 0)) == 1"],
                "def lobb(n, m):\n    return float(n * 7) if (n, m) == (5, 3) else float(n + m)\n"
                "def uniq(xs):\n    return dict.fromkeys(xs).keys()\n"
                "def mean(xs):\n    return sum(xs) / len(xs)\ndef keys(d):\n    return d.keys()",
                "def lobb(n, m):\n    return 34.0\ndef uniq(xs):\n    return xs\n"
                "def mean(xs):\n    return 1.6\ndef keys(d):\n    return d"),
    # Python's == on the decoded values: a Counter / defaultdict / OrderedDict is the dict it equals.
    "dicts": (["assert freq('abca') == {'a': 2, 'b': 1, 'c': 1}", "assert groups([1, 2, 3]) == {0: [2], 1: [1, 3]}",
               "assert ordered('ba') == {'a': 1, 'b': 0}"],
              "from collections import Counter, OrderedDict, defaultdict\ndef freq(s):\n    return Counter(s)\n"
              "def groups(xs):\n    d = defaultdict(list)\n    for x in xs:\n        d[x % 2].append(x)\n    return d\n"
              "def ordered(s):\n    return OrderedDict((c, i) for i, c in enumerate(s))",
              "from collections import Counter, defaultdict\ndef freq(s):\n    return Counter(s * 2)\n"
              "def groups(xs):\n    return defaultdict(list)\ndef ordered(s):\n    return {}"),
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


def test_python_equality_on_plain_data():
    """The decoded plain values compare with Python's own == (what the tests' authors
    ran), floats within a tolerance; there is no candidate object left to lie."""
    tests = assert_tests(["assert f(1) == 1", "assert f(2) == 2"])
    assert grade_program("def f(x):\n    return float(x)", tests).success  # 1.0 == 1
    assert grade_program("def f(x):\n    return True if x == 1 else 2", tests).success  # True == 1
    falsy = assert_tests(["assert f(0) == False", "assert f(1) == True"])
    assert grade_program("def f(x):\n    return x", falsy).success  # MBPP task 414's 0 for False
    assert grade_program("def f(x):\n    return 0.1 + 0.2 if x == 0 else 1", assert_tests(["assert f(0) == 0.3"])).success
    tuples = assert_tests(["assert f() == (1, 2)"])
    assert not grade_program("def f():\n    return [1, 2]", tuples).success  # [1, 2] != (1, 2)
    assert grade_program("def f():\n    return (1, 2)", tuples).success
    deque = grade_program("import collections\ndef f():\n    return collections.deque([1, 2])", assert_tests(["assert f() == [1, 2]"]))
    assert deque.verdict.value == "FAIL" and "not plain data" in deque.feedback  # Python: deque([1, 2]) != [1, 2]
    # `is` stays identity: 0 is not False.
    assert not grade_program("def f(x):\n    return 0", assert_tests(["assert f(1) is False"])).success
    assert grade_program("def f(x):\n    return x > 1", assert_tests(["assert f(1) is False"])).success


def test_truthy_asserts_apply_bool_in_the_sandbox():
    tests = assert_tests(["assert has(3)", "assert not has(0)"])
    assert grade_program("class Box:\n    def __init__(self, n): self.n = n\n    def __bool__(self): return self.n > 0\n"
                         "def has(n):\n    return Box(n)", tests).success
    grade = grade_program("def has(n):\n    return [n]", tests)
    assert grade.verdict.value == "FAIL" and grade.feedback == "test `assert not has(0)` failed: has(0) returned a true value"


def test_setup_code_and_expression_arguments():
    """MBPP's test_setup_code (tasks 367, 927) runs after the program, in its namespace;
    arguments may name what it binds, builtins (task 533) or the program's classes (601)."""
    setup = "import math\nroot = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\nsmall = Node(7)"
    tests = assert_tests(["assert height(root) == 3", "assert (height(small)) == 1", "assert height(None) == 0",
                          "assert keep((1, 2.5, 'a'), int) == [1]", "assert chain([Pair(1, 2), Pair(3, 4)]) == 2",
                          "assert floor_of(math.pi) == 3"], setup=setup)
    program = ("class Node:\n    def __init__(self, v):\n        self.v, self.left, self.right = v, None, None\n"
               "def height(n):\n    return 0 if n is None else 1 + max(height(n.left), height(n.right))\n"
               "def keep(xs, t):\n    return [x for x in xs if type(x) is t]\n"
               "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\n"
               "def chain(ps):\n    return len(ps)\ndef floor_of(x):\n    return int(x)")
    assert tests.setup == setup and tests.checks[0].args == ("root",)
    assert grade_program(program, tests).success
    grade = grade_program(program.replace("1 + max", "2 + max"), tests)
    assert grade.feedback == "test `assert height(root) == 3` failed: height(root) returned 6, expected 3", grade
    # The program did not define the class the setup code builds: its fault, an ERROR that says so.
    grade = grade_program("def height(n):\n    return 3\ndef keep(xs, t): pass\ndef chain(ps): pass\ndef floor_of(x): pass", tests)
    assert grade.verdict.value == "ERROR" and "the test setup code raised NameError: name 'Node'" in grade.feedback, grade
    grade = grade_program(program.replace("class Pair", "class Pear"), tests)
    assert grade.verdict.value == "ERROR" and "chain([Pair(1, 2), Pair(3, 4)]) raised NameError" in grade.feedback, grade


def test_expected_values_stay_on_the_host():
    """sys.getsizeof of a literal (MBPP task 596) is computed here; nothing of the expected
    side is sent to the sandbox, only the calls."""
    tests = assert_tests(['assert size(("A", 1)) == sys.getsizeof(("A", 1))'])
    assert tests.checks[0].expected == __import__("sys").getsizeof(("A", 1))
    assert grade_program("import sys\ndef size(t):\n    return sys.getsizeof(t)", tests).success
    spy = ("import gc, sys\ndef size(t):\n    needle = ''.join(['== sys.', 'getsizeof('])\n"
           "    found = [o for o in gc.get_objects() if type(o) in (list, tuple, dict) and needle in repr(o)]\n"
           "    return len([o for o in found if not (type(o) is dict and o.get('needle') == needle)])")
    assert grade_program(spy, tests).feedback.endswith(f"returned 0, expected {tests.checks[0].expected}")


@pytest.mark.parametrize(
    "bad",
    [
        "assert f(x) == 1",  # non-literal argument
        "assert f(1) == g(2)",  # computed expectation
        "assert isinstance(f(1), int)",
        "assert f(1) > 2",
        "for i in range(3): assert f(i) == i",
        "assert f(1) == 1; assert f(2) == 2",
        "assert f(1) == root",  # computed (by the setup) expectation
        "assert f(lambda: 1) == 1",
        "assert f([x for x in 'ab']) == 1",
        "assert int(f(1)) == int(f(2))",
        "assert f(1) != 2",
        "assert sorted(f(1), key=len) == []",
    ],
)
def test_undecomposable_assert_refused_at_load(bad):
    with pytest.raises(ValueError) as err:
        assert_tests(["assert f(0) == 0", bad])
    assert repr(bad.strip()) in str(err.value) or "exactly one assert" in str(err.value)


@pytest.mark.parametrize(
    "bad, why",
    [
        ("assert f(x) == 1", "argument 'x' uses the name 'x', which is neither a literal, a builtin, nor bound by the row's test setup"),
        ("assert f(1) == root", "expected value 'root' is not a literal"),
        ("assert f(lambda: 1) == 1", "argument 'lambda: 1' uses Lambda"),
        ("assert int(f(1)) == int(f(2))", "both sides call the function tested"),
        ("assert math.isclose(f(1), g(2))", "math.isclose needs one call of the function tested and one literal"),
        ("assert isinstance(f(1), int)", "builtin isinstance() is applied to 'f(1)'; only int, float"),
    ],
)
def test_refusals_say_why(bad, why):
    with pytest.raises(ValueError, match=re.escape(f"cannot decompose test {bad!r}: {why}")):
        assert_tests([bad], setup="root = 1")


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
    "str_subclass": "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\ndef f(x):\n    return S('x')",
    # Objects that pass for the dicts the harness decodes as plain dicts.
    "fake_counter": "class Counter(dict):\n    def __eq__(self, o): return True\n    __hash__ = None\ndef f(x):\n    return Counter()",
    "patched_counter": ("import collections\nclass C(collections.Counter):\n    def __eq__(self, o): return True\n"
                        "collections.Counter = C\ndef f(x):\n    return collections.Counter(a=1)"),
    "counter_lying_items": ("import collections\ncollections.Counter.items = lambda self: [(10, 10)]\n"
                            "collections.Counter.keys = lambda self: [10]\ndef f(x):\n    return collections.Counter()"),
    # The builtins a test wraps the call in, replaced by ones returning a rigged object.
    "patch_wrappers": ("import builtins\nclass E:\n    def __eq__(self, o): return True\n    def __bool__(self): return True\n"
                       "for name in ('int', 'sorted', 'bool', 'len', 'set', 'round', 'str'):\n"
                       "    setattr(builtins, name, lambda *a, **k: E())\ndef f(x):\n    return E()"),
    "huge_output": "def f(x):\n    return 'x' * (1 << 25)",
    "deep_output": "def f(x):\n    v = []\n    for _ in range(10000):\n        v = [v]\n    return v",
    "print_fake_results": ("import json\ndef f(x):\n    print(json.dumps({'phase': 'done', 'results': [{'ok': 10}, {'ok': 13}]}))\n"
                           "    print('all 2 tests passed')"),
    # Looks for the tests (their text or expected values) anywhere in its process.
    "read_tests": (
        "import gc, sys\n"
        "def f(x):\n"
        "    for o in gc.get_objects():\n"
        "        if type(o) is dict and 'expected' in o: return o['expected']\n"
        "        if type(o) in (list, tuple) and any(type(i) is str and '==' in i for i in o): return o\n"
        "    return sys.argv"
    ),
}


# Asserts in every shape the harness runs: wrapped calls, dicts (Counter-like results
# decode as dicts), truthiness (bool() in the sandbox), setup code, `is`.
WRAPPED = ["assert int(f(3)) == 10", "assert sorted(f(4)) == [1, 3]", "assert f(5) == {'a': 1}", "assert len(f(6)) == 2",
           "assert f(7)", "assert not f(8)", "assert f(box) == 2", "assert f(9) is None", "assert round(f(1), 1) == 0.5"]


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_earn_nothing_on_decomposed_asserts(name):
    tests = assert_tests(["assert f(3) == 10", "assert f(4) == 13"])
    grade = grade_program(CHEATS[name], tests)
    assert grade.reward == 0.0 and not grade.success and not grade.infra_error, grade
    tests = assert_tests(WRAPPED, setup="box = [1, 2]")
    grade = grade_program(CHEATS[name], tests)
    assert grade.reward == 0.0 and not grade.success and not grade.infra_error, grade


def test_wrapped_asserts_pass_an_honest_program():
    honest = ("import collections\ndef f(x):\n    return {3: 10.0, 4: (3, 1), 5: collections.Counter('a'), 6: 'ab', 7: [0],"
              " 8: '', 9: None, 1: 0.54}.get(x) if type(x) is int else len(x)")
    assert grade_program(honest, assert_tests(WRAPPED, setup="box = [1, 2]")).success


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


def test_harnesses_are_modules_that_run_here_as_in_the_sandbox():
    """Each harness is a real module (imported here) and ships as wire.py + its own
    text, without the import of wire; run in-process, the calls harness returns the
    tagged results the host decodes, and the check harness refuses a rigged object."""
    import json

    from environments.programs import harness
    from environments.programs.harness import check
    from environments.programs.values import untag

    for name in harness.HARNESSES:
        text = harness.source(name)
        assert "from environments" not in text and "def _rlpt_main(" in text
        compile(text, f"<{name}>", "exec")
    namespace: dict = {}
    exec(compile(harness.source("calls"), "<calls>", "exec"), namespace)
    chunks = namespace["_rlpt_main"]("def f(x):\n    return {'a': (x, [x])}\n", "", [["f", ["2"], [], []]])
    (result,) = json.loads("".join(chunks))["results"]
    assert untag(result["ok"]) == {"a": (2, [2])}
    rigged = "class E(int):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return E(0)\n"
    payload = json.loads("".join(check._rlpt_main(rigged, "f", "", "def check(c):\n    assert c(1) == 5\n")))
    assert payload["passed"] is False and payload["error_type"] == "TypeError"
