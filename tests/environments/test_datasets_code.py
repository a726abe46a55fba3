"""Dataset domains with the `code` verifier: unit tests in the answer field, graded in the sandbox."""

import json
import re
import uuid

import gymnasium
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import environments  # noqa: F401  (registers domains)
from environments import datasets, programs, registry, sandbox
from environments.datasets import code

CHECK = "def check(candidate):\n    for n in range(5):\n        assert candidate(n) == n * n + 1\n"
ROWS = [
    {"id": "add", "prompt": "Write add(a, b) returning a + b.", "split": "train",
     "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]},
    {"id": "rev", "prompt": "Write rev(s) returning s reversed.", "split": "train",
     "tests": ["assert rev('abc') == 'cba'", "assert rev('') == ''"]},
    {"id": "even", "prompt": "Write is_even(n).", "split": "train",
     "tests": "assert is_even(4)\nassert not is_even(3)\nassert is_even(0) == True\n"},
    {"id": "sq1", "prompt": "Write sq1(n) returning n*n + 1.", "split": "train", "tests": CHECK, "entry": "sq1"},
    {"id": "sum", "prompt": "Read two integers from stdin and print their sum.", "split": "train",
     "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4\n", "output": "6"}]},
    {"id": "echo", "prompt": "Print each input line upper-cased.", "split": "train",
     "tests": [{"input": "ab\ncd\n", "output": "AB\nCD\n"}]},
]
RIGHT = {
    "add": "def add(a, b):\n    return a + b",
    "rev": "```python\ndef rev(s):\n    return s[::-1]\n```",
    "even": "def is_even(n):\n    return n % 2 == 0",
    "sq1": "def sq1(n):\n    return n * n + 1",
    "sum": "a, b = map(int, input().split())\nprint(a + b)",
    "echo": "import sys\nfor line in sys.stdin:\n    print(line.strip().upper())",
}
WRONG = {
    "add": ("def add(a, b):\n    return a - b", "add(1, 2)"),
    "rev": ("def rev(s):\n    return s", "rev('abc')"),
    "even": ("def is_even(n):\n    return n % 2 == 1", "is_even(4)"),
    "sq1": ("def sq1(n):\n    return n * n", "check(candidate) failed"),
    "sum": ("a, b = map(int, input().split())\nprint(a - b)", "test 1 failed"),
    "echo": ("import sys\nprint(sys.stdin.read())", "test 1 failed"),
}
ALWAYS_EQUAL = ("class E:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
                "    def __bool__(self): return True\n")
FIELDS = {"answer": "tests", "entry_point": "entry"}


def _id() -> str:
    return f"rlpt/dataset-c{uuid.uuid4().hex[:12]}-v0"


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _tasks_by_id(env):
    """{row id: seed} reaching every row."""
    seeds = {}
    prompts = {r["prompt"]: r["id"] for r in ROWS}
    for seed in range(300):
        obs, _ = env.reset(seed=seed)
        seeds.setdefault(prompts[obs], seed)
        if len(seeds) == len(ROWS):
            return seeds
    raise AssertionError(f"reset never drew {set(prompts.values()) - set(seeds)}")


def test_code_domain_grades_in_the_sandbox(tmp_path):
    spec = datasets.register_file(_id(), _jsonl(tmp_path / "c.jsonl", ROWS), verifier="code", fields=FIELDS)
    assert "sandbox" in spec.tags and "code" in spec.tags and spec.max_answer_chars == code.MAX_ANSWER_CHARS
    env = gymnasium.make(spec.id)
    for row_id, seed in _tasks_by_id(env).items():
        env.reset(seed=seed)
        _, reward, _, _, info = env.step(RIGHT[row_id])
        assert (info["verdict"], reward) == ("PASS", 1.0), (row_id, info)
        env.reset(seed=seed)
        answer, named = WRONG[row_id]
        _, reward, _, _, info = env.step(answer)
        assert (info["verdict"], reward) == ("FAIL", 0.0), (row_id, info)
        assert named in info["feedback"], (row_id, info["feedback"])
        if row_id in ("add", "rev", "even", "sq1"):
            env.reset(seed=seed)
            fn = {"add": "add(a, b)", "rev": "rev(s)", "even": "is_even(n)", "sq1": "sq1(n)"}[row_id]
            cheat = ALWAYS_EQUAL + f"def {fn}:\n    return E()"
            _, reward, _, _, info = env.step(cheat)
            assert info["verdict"] != "PASS" and reward == 0.0, (row_id, info)


def test_tests_are_parsed_once_at_load(tmp_path):
    tasks = datasets.load_tasks(_jsonl(tmp_path / "c.jsonl", ROWS), "code", fields=FIELDS)
    forms = [task.hidden.form for task, _ in tasks]
    assert all(isinstance(task.hidden, programs.ProgramTests) for task, _ in tasks)
    assert forms == ["asserts", "asserts", "asserts", "check", "stdio", "stdio"]
    assert tasks[3][0].hidden.entry == "sq1" and tasks[0][0].demonstration == ""
    assert tasks[4][0].hidden.timeout_s == 2.0
    timed = datasets.load_tasks(tmp_path / "c.jsonl", "code", fields=FIELDS, options={"timeout_s": 1.5})
    assert {t.hidden.timeout_s for t, _ in timed} == {1.5}


def test_parquet_loads_the_same_tasks(tmp_path):
    path = tmp_path / "c.parquet"
    # Parquet columns have one type: tests as JSON text, a supported form of the reference.
    rows = [{**r, "tests": r["tests"] if isinstance(r["tests"], str) else json.dumps(r["tests"]),
             "entry": r.get("entry")} for r in ROWS]
    pq.write_table(pa.Table.from_pylist(rows), path)
    from_jsonl = datasets.load_tasks(_jsonl(tmp_path / "c.jsonl", ROWS), "code", fields=FIELDS)
    assert datasets.load_tasks(path, "code", fields=FIELDS) == from_jsonl
    # A list<string> column (MBPP's test_list as Parquet) works too.
    mbpp = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([{k: ROWS[0][k] for k in ("id", "prompt", "tests")}]), mbpp)
    [(task, _)] = datasets.load_tasks(mbpp, "code", fields={"answer": "tests"})
    assert task.hidden == from_jsonl[0][0].hidden


def test_entry_point_option(tmp_path):
    path = _jsonl(tmp_path / "h.jsonl", [{"prompt": "Write sq1.", "tests": CHECK}])
    with pytest.raises(ValueError, match=r"h\.jsonl: line 1: field 'tests': .*entry_point"):
        datasets.load_tasks(path, "code", fields={"answer": "tests"})
    [(task, _)] = datasets.load_tasks(path, "code", fields={"answer": "tests"}, options={"entry_point": "sq1"})
    assert task.hidden.entry == "sq1"


BAD_TESTS = {
    "non-literal expected": (["assert f(1) == 2", "assert f(x) == g(y)"], "assert f\\(x\\) == g\\(y\\)"),
    "not an assert": ("x = 1\nassert f(x) == 1", "only assert statements"),
    "syntax error": ("assert f(1) ==", "not valid Python"),
    "empty list": ([], "empty"),
    "mixed list": (["assert f(1) == 1", {"input": "", "output": ""}], "not a mix"),
    "bad stdio pair": ([{"input": "1", "expected": "2"}], "'input' and 'output'"),
    "an object": ({"input": "1", "output": "2"}, "got an object"),
}


@pytest.mark.parametrize("name", sorted(BAD_TESTS))
def test_bad_tests_refuse_their_row_or_with_strict_the_file(tmp_path, name):
    tests, message = BAD_TESTS[name]
    rows = [{"prompt": "ok", "tests": ["assert f(1) == 2"]}, {"prompt": "bad", "tests": tests}]
    path = _jsonl(tmp_path / "b.jsonl", rows)
    with pytest.raises(ValueError, match=rf"b\.jsonl: line 2: field 'tests'.*{message}"):
        datasets.register_file(_id(), path, verifier="code", fields={"answer": "tests"}, strict=True)
    if name in ("empty list", "an object"):  # the file's own syntax: a loader error whatever `strict` says
        return
    domain_id = _id()
    datasets.register_file(domain_id, path, verifier="code", fields={"answer": "tests"})
    domain = registry.domain(domain_id)
    assert [t.prompt for t in domain._tasks] == ["ok"]
    [refused] = domain.refused
    assert refused.where == "line 2" and re.search(rf"field 'tests'.*{message}", refused.reason)


def test_other_kinds_still_refuse_list_answers(tmp_path):
    path = _jsonl(tmp_path / "l.jsonl", [{"prompt": "p", "answer": ["assert f(1) == 2"]}])
    with pytest.raises(ValueError, match="must be str or int or float"):
        datasets.load_tasks(path, "exact")


def test_sandbox_failures_are_sandbox_error(tmp_path, monkeypatch):
    spec = datasets.register_file(_id(), _jsonl(tmp_path / "c.jsonl", ROWS[:1]), verifier="code", fields=FIELDS)
    env = gymnasium.make(spec.id)
    monkeypatch.setattr(sandbox, "run",
                        lambda job: sandbox.JobResult(sandbox.Status.SANDBOX_ERROR, detail="worker died"))
    env.reset(seed=0)
    _, reward, _, _, info = env.step(RIGHT["add"])
    assert info["verdict"] == "SANDBOX_ERROR" and info["infra_error"] and reward == 0.0


# MBPP-shaped rows of our own making, with its columns (text, test_list, task_id,
# test_setup_code; test_imports as in its sanitized file: a list of import lines).
NODE = "class Node:\n    def __init__(self, v):\n        self.v, self.left, self.right = v, None, None\n"
MBPP_ROWS = [
    {"task_id": 1, "text": "Write a function counting letters.", "test_setup_code": "", "test_imports": [],
     "test_list": ["assert letters('aba') == {'a': 2, 'b': 1}", "assert letters('') == {}"]},
    {"task_id": 2, "text": "Write a function for the n-th triangle number.", "test_setup_code": "",
     "test_list": ["assert int(tri(3)) == 6", "assert int(tri(1)) == 1"]},
    {"task_id": 3, "text": "Write a function for a binary tree's height.",
     "test_setup_code": "root = Node(1)\r\nroot.left = Node(2)\r\nroot.left.right = Node(3)\r\nleaf = Node(4)",
     "test_list": ["assert height(root) == 3", "assert height(leaf) == 1"]},
    {"task_id": 4, "text": "Write a function rounding down a real number.", "test_setup_code": "",
     "test_imports": ["import math"], "test_list": ["assert floor_of(math.e) == 2", "assert floor_of(-0.5) == -1"]},
    {"task_id": 5, "text": "Write a function telling whether a number is odd.", "test_setup_code": "",
     "test_list": ["assert is_odd(3) == True", "assert is_odd(4) == False"]},
    {"task_id": 6, "text": "A row whose test compares with a value computed in the sandbox.", "test_setup_code": "",
     "test_list": ["assert twice(2) == 4", "assert twice(x) == 2 * x"]},
]
MBPP_CODE = {
    1: "from collections import Counter\ndef letters(s):\n    return Counter(s)",
    2: "def tri(n):\n    return n * (n + 1) / 2",
    3: NODE + "def height(n):\n    return 0 if n is None else 1 + max(height(n.left), height(n.right))",
    4: "import math\ndef floor_of(x):\n    return math.floor(x)",
    5: "def is_odd(n):\n    return n % 2",
}
MBPP_FIELDS = {"prompt": "text", "answer": "test_list", "id": "task_id"}


def test_mbpp_rows_as_their_authors_meant(tmp_path):
    """Counter for a dict, 0/1 for False/True, int() around the call, the setup code
    building the tree with the program's class, the imports: each row's canonical
    program passes; the one assert that does not split refuses its row only."""
    spec = datasets.register_file(_id(), _jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS), verifier="code", fields=MBPP_FIELDS)
    domain = registry.domain(spec.id)
    [refused] = domain.refused
    assert (refused.id, refused.where) == ("6", "line 6")
    assert "cannot decompose test 'assert twice(x) == 2 * x': expected value '2 * x' is not a literal" in refused.reason
    tasks = {task.key: task for task in domain._tasks}
    assert sorted(tasks) == ["1", "2", "3", "4", "5"]
    assert "root = Node(1)\nroot.left" in tasks["3"].hidden.setup and tasks["4"].hidden.setup == "import math"
    for key, task in tasks.items():
        grade = domain.grade(task, MBPP_CODE[int(key)])
        assert grade.success, (key, grade)
    wrong = {"1": "def letters(s):\n    return {c: 1 for c in s}", "2": "def tri(n):\n    return n * n / 2",
             "3": NODE + "def height(n):\n    return 3", "4": "def floor_of(x):\n    return round(x)",
             "5": "def is_odd(n):\n    return 1"}
    for key, answer in wrong.items():
        grade = domain.grade(tasks[key], answer)
        assert grade.verdict.value == "FAIL" and grade.reward == 0.0, (key, grade)
    assert "int(tri(3)) returned 4, expected 6" in domain.grade(tasks["2"], wrong["2"]).feedback
    grade = domain.grade(tasks["3"], "def height(n):\n    return 3")  # no Node: the setup code cannot run
    assert grade.verdict.value == "ERROR" and "the test setup code raised NameError" in grade.feedback, grade
    with pytest.raises(ValueError, match=r"line 6: .*cannot decompose test 'assert twice\(x\) == 2 \* x'"):
        datasets.load_tasks(tmp_path / "mbpp.jsonl", "code", fields=MBPP_FIELDS, strict=True)


def test_setup_code_only_with_assert_tests(tmp_path):
    rows = [{"prompt": "p", "tests": [{"input": "1", "output": "1"}], "test_setup_code": "x = 1"},
            {"prompt": "q", "tests": CHECK, "entry": "sq1", "test_setup_code": "x = 1"}]
    with pytest.raises(ValueError, match="line 1: .*stdin/stdout tests has no place for them"):
        datasets.load_tasks(_jsonl(tmp_path / "s.jsonl", rows), "code", fields=FIELDS, strict=True)
    stats = datasets.validate_file(tmp_path / "s.jsonl", "code", fields=FIELDS)
    assert [r.where for r in stats.refused] == ["line 1", "line 2"]
    assert "a check(candidate) test has no place for them" in stats.refused[1].reason
    assert code.test_setup("import math\nimport re", "a = 1\r\nb = 2") == "import math\nimport re\na = 1\nb = 2"
    assert code.test_setup(None, "") == ""
