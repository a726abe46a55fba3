"""One encoding and one comparison for every grader: values a job returns
cross as tagged plain data (environments/sandbox/tagged.py) and are compared
on the host with Python's == on decoded builtin data (values.same)."""

import json

import numpy as np
import pytest

import environments  # noqa: F401
from environments import grading, registry
from environments.grading import grade_calls
from environments.programs import harness
from environments.programs.values import FLOAT_RTOL, untag
from environments.sandbox import JobResult, Status, tagged, worker


def _grade(values, expected, calls=None):
    calls = calls or tuple((i,) for i in range(len(values)))
    result = JobResult(Status.OK, result={"phase": "done", "results": [{"ok": v} for v in values]})
    return grade_calls(result, calls, expected, entry="f", timeout_s=1.0)


def test_the_worker_and_every_harness_use_the_one_encoder():
    assert worker._rlpt_tag is tagged._rlpt_tag
    assert not hasattr(worker, "_encode_value") and not hasattr(grading, "same_value")
    with open(tagged.__file__, encoding="utf-8") as f:
        text = f.read()
    for name in harness.HARNESSES:
        assert harness.source(name).startswith(text) and harness.source(name).count("def _rlpt_tag(") == 1


@pytest.mark.parametrize("value", [1, True, 2.5, "a", None, (1, [2, (3,)]), {1: "x", (2, 3): {4}}, frozenset({1}),
                                   b"\x00\xff", 1 + 2j, [], {}])
def test_tagged_values_decode_to_themselves(value):
    got = untag(json.loads(json.dumps(tagged._rlpt_tag(value))))
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "got, want, verdict",
    [
        (True, 1, "PASS"),  # what `assert f(x) == 1` accepts
        (2.0, 2, "PASS"),
        (1.0 + FLOAT_RTOL / 10, 1, "PASS"),
        ({"list": [1, 2]}, [1, 2], "PASS"),
        ({"tuple": [1, 2]}, [1, 2], "FAIL"),  # a tuple is not a list (the old encoding could not tell)
        ({"dict": [["a", 1]]}, {"a": 1}, "PASS"),
        (3, 2, "FAIL"),
        ("2", 2, "FAIL"),
        ({"opaque": "E"}, 0, "FAIL"),  # a rigged object never reaches the comparison
        ({"list": [{"opaque": "E"}]}, [0], "FAIL"),
    ],
)
def test_comparison_is_python_equality_on_plain_data(got, want, verdict):
    assert _grade([got], [want]).verdict.value == verdict


def test_feedback_names_the_call_the_expected_and_the_returned_value():
    grade = _grade([{"tuple": [1, 2]}], [[1, 2]], calls=((1, "a"),))
    assert grade.feedback == "f(1, 'a'): expected [1, 2], got (1, 2)"
    assert _grade([{"opaque": "E"}], [5]).feedback == "f(0): expected 5, got <E object>"


@pytest.mark.parametrize("out", [{"list": 5}, {"nope": []}, {"dict": [[1]]}, {"set": [{"list": []}]}, {"a": 1, "b": 2}])
def test_a_malformed_value_is_an_error(out):
    grade = _grade([out], [5])
    assert (grade.verdict.value, grade.reward) == ("ERROR", 0.0) and "malformed" in grade.feedback


def test_malformed_results_are_an_error():
    for results in ([5], "x", None):
        result = JobResult(Status.OK, result={"phase": "done", "results": results})
        grade = grade_calls(result, ((1,),), [2], entry="f", timeout_s=1.0)
        assert (grade.verdict.value, grade.reward) == ("ERROR", 0.0), grade


def test_the_code_family_accepts_what_python_equality_accepts():
    domain = registry.domain("rlpt/code-linear-easy-v0")
    task = domain.sample(np.random.default_rng(0))
    ref = task.demonstration
    assert domain.grade(task, ref).verdict.value == "PASS"
    assert domain.grade(task, f"float({ref})").verdict.value == "PASS"
    assert domain.grade(task, f"({ref})+0.5").verdict.value == "FAIL"
    assert domain.grade(task, f"(({ref}),)").verdict.value == "FAIL"


def test_check_sees_returned_values_as_the_host_would_decode_them():
    from environments.programs.harness import check

    counter = "import collections\ndef f(s):\n    return collections.Counter(s)\n"
    test = "def check(c):\n    assert type(c('aab')) is dict and c('aab') == {'a': 2, 'b': 1}\n"
    assert json.loads("".join(check._rlpt_main(counter, "f", "", test)))["passed"] is True
    subclass = "class L(list):\n    pass\ndef f(s):\n    return L(s)\n"
    payload = json.loads("".join(check._rlpt_main(subclass, "f", "", "def check(c):\n    assert c('a') == ['a']\n")))
    assert payload["passed"] is False and payload["error_type"] == "TypeError" and "L" in payload["error"]
