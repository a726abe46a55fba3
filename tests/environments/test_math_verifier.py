"""The `math` verifier on Math-Verify: references it accepts, the one answer
order, MALFORMED feedback, worker threads and errors. Every example here is
written for this file (no public data)."""

import concurrent.futures
import json
import os
import subprocess
import sys
import time

import pytest

from environments.datasets import verifiers


def _grade(answer, reference):
    kind = verifiers.get_verifier("math")
    return kind.grade(answer, reference, verifiers.resolve_options(kind, {}))


def _verdict(answer, reference):
    return _grade(answer, reference).verdict.value


@pytest.mark.parametrize("reference", [
    "(2, -3)", r"$\{1, 4, 9\}$", "[0, 5)", r"$x \le 4$", r"\begin{pmatrix}1 & 2\\ 3 & 4\end{pmatrix}",
    r"7 \text{ cm}", r"\$250", r"21{,}408",
])
def test_structured_references_are_accepted(reference):
    kind = verifiers.get_verifier("math")
    assert kind.check_reference(reference, {}) is None
    assert _verdict(kind.demonstrate(reference), reference) == "PASS"


@pytest.mark.parametrize("answer,reference,verdict", [
    ("The pair is $(2, -3)$.", "(2, -3)", "PASS"),
    (r"\boxed{(-3, 2)}", "(2, -3)", "FAIL"),
    (r"$\{9, 1, 4\}$", r"\{1, 4, 9\}", "PASS"),
    (r"$4 \ge x$", r"x \le 4", "PASS"),
    (r"\boxed{\begin{pmatrix}1 & 2\\ 3 & 5\end{pmatrix}}", r"\begin{pmatrix}1 & 2\\ 3 & 4\end{pmatrix}", "FAIL"),
    (r"\sqrt 3+\sqrt 7", r"\sqrt{3}+\sqrt{7}", "PASS"),
    (r"\cfrac{2}{7}", r"\frac{2}{7}", "PASS"),
    (r"\frac{2}{7} \text{meters}", r"\frac{2}{7}", "PASS"),
    (r"\boxed{45 percent}", "45%", "PASS"),
    (r"\boxed{21{,}408}", "21408", "PASS"),
    (r"\$12,\!504.75", "12504.75", "PASS"),
    (r"\boxed{\$41}", "41", "PASS"),
    (r"\boxed{41 \text{ dollars}}", "41", "PASS"),
    (r"\boxed{41 apples}", "41", "PASS"),
    ("QWX7RT", "7", "MALFORMED"),
    ("$-[0,3)$", "3", "MALFORMED"),
])
def test_values_math_verify_reads(answer, reference, verdict):
    assert _verdict(answer, reference) == verdict


@pytest.mark.parametrize("answer,verdict", [
    (r"So far \boxed{88}. Final Answer: The final answer is $\frac{3}{4}$. I hope it is correct.", "PASS"),
    (r"An intermediate \boxed{88} first. The final answer is $\frac{3}{4}$", "PASS"),
    (r"First \boxed{88}, then 5 + 6 = 11.\nThe answer is 3/4.", "PASS"),
    (r"We get \boxed{88}, and 12 more." "\n0.75", "PASS"),
])
def test_one_answer_order(answer, verdict):
    assert _verdict(answer.replace(r"\n", "\n"), r"\frac{3}{4}") == verdict


def test_gsm8k_style_money_answers_pass_and_their_neighbours_fail():
    for answer in (r"\boxed{\$1,250}", r"\boxed{1250 \text{ dollars}}", "The answer is $1,250.",
                   "Final Answer: The final answer is $1,250$. I hope it is correct.", "#### 1,250"):
        assert _verdict(answer, "1250") == "PASS", answer
        assert _verdict(answer.replace("1,250", "1,251").replace("1250", "1251"), "1250") == "FAIL", answer
        # After an intermediate box, a final answer statement is the answer; a second,
        # different box is a second answer (environments.answers): not accepted.
        grade = _grade("Each costs $5, so 5 * 250 = \\boxed{1000} before tax.\n" + answer, "1250")
        if answer.startswith("\\boxed"):
            assert grade.verdict.value == "MALFORMED" and "2 different boxed answers" in grade.feedback, answer
        else:
            assert grade.verdict.value == "PASS", answer


def test_malformed_feedback_names_what_was_found():
    boxed = _grade(r"Therefore \boxed{a big number}.", "12")
    assert boxed.verdict.value == "MALFORMED" and "boxed answer" in boxed.feedback and "\\boxed{<value>}" not in boxed.feedback
    statement = _grade("The answer is: see above.", "12")
    assert statement.verdict.value == "MALFORMED" and "statement" in statement.feedback
    nothing = _grade("I could not work it out.", "12")
    assert nothing.verdict.value == "MALFORMED" and "\\boxed{<value>}" in nothing.feedback


def test_answer_candidates_follow_the_same_order():
    assert verifiers.answer_candidates("Maybe \\boxed{3}.\nThe answer is 4.")[0] == "4"
    assert verifiers.answer_candidates("First 12, then \\boxed{5}")[0] == "5"
    assert verifiers.get_verifier("numeric").grade("So \\boxed{3} and then the answer is 4.0", "4",
                                                   {"rel_tol": 1e-6, "abs_tol": 0.0}).verdict.value == "PASS"


@pytest.mark.parametrize("hostile", ["[" * 60 + "2" + "]" * 60, "{" * 40 + "5" + "}" * 40])
def test_hostile_values_are_refused_quickly(hostile):
    start = time.monotonic()
    assert _verdict(hostile, "12") == "MALFORMED"
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("reply", [
    "5 " + "a" * 60 + "!",            # one long run of letters after a value, not at the end
    "The total is 7 " + "xy" * 40 + "?",
    "5 " + "ab. " * 500 + "1",
])
def test_unit_word_stripping_is_not_exponential(reply):
  """A reply a small base model writes ("5 aaaa...a!") once made the unit-word
  pattern try every split of the run into words: 40 letters took 18 s and 60
  would take days, holding the GIL, so no time-out could stop it and every
  grading thread stalled. Graded in a child process, so a regression fails
  here instead of hanging the suite."""
  code = ("import json, sys; from environments.datasets import verifiers; "
          "k = verifiers.get_verifier('math'); "
          "print(k.grade(json.loads(sys.argv[1]), '12', verifiers.resolve_options(k, {})).verdict.value)")
  done = subprocess.run([sys.executable, "-c", code, json.dumps(reply)], capture_output=True, text=True,
                        timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.strip() in {"FAIL", "MALFORMED"}


def test_repeating_the_last_box_does_not_hide_an_earlier_different_one():
  """Only the last distinct boxes are read (answers.MAX_BOXES), and a repeated
  box counts once, so 40 copies of one answer after another are still two."""
  assert _verdict("\\boxed{12} " + "\\boxed{7} " * 40, "12") == "MALFORMED"
  assert _verdict("\\boxed{7} " * 40 + "\\boxed{12}", "12") == "MALFORMED"
  assert _verdict("\\boxed{12} " * 40, "12") == "PASS"


def test_grading_works_in_worker_threads():
    cases = [(r"\boxed{\frac{3}{4}}", r"\frac{3}{4}", "PASS"), ("The answer is (1, 2).", "(1, 2)", "PASS"),
             ("#### 18", "19", "FAIL"), ("9**9**9", "12", "MALFORMED")] * 8
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda c: _verdict(c[0], c[1]), cases))
    assert got == [c[2] for c in cases]


def test_internal_errors_raise_instead_of_failing(monkeypatch):
    from math_verify import grader

    def broken(*args, **kwargs):
        raise RuntimeError("comparison broke")

    monkeypatch.setattr(grader, "sympy_expr_eq", broken)
    with pytest.raises(RuntimeError, match="comparison broke"):
        _grade(r"\boxed{5}", "5")


def test_gsm8k_shaped_file_registers_unmodified(tmp_path):
    from environments import registry
    from environments.datasets import register_file

    rows = [{"question": "Ann has 4 pens and buys 3 more. How many pens?", "answer": "4 + 3 = <<4+3=7>>7\n#### 7"},
            {"question": "A lamp costs $1,200 and a rug $300. Total?", "answer": "1200 + 300 = 1500\n#### 1,500"}]
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = register_file("rlpt/dataset-mathverify-gsm-v0", path, verifier="math",
                         fields={"prompt": "question", "answer": "answer"}, reference="after:####")
    domain = registry.domain(spec.id)
    tasks = {t.prompt: t for t in domain._tasks}
    pens, lamp = tasks[rows[0]["question"]], tasks[rows[1]["question"]]
    assert domain.grade(pens, "4 + 3 = 7 so \\boxed{7 \\text{ pens}}").verdict.value == "PASS"
    assert domain.grade(lamp, "Total: \\boxed{\\$1,500}").verdict.value == "PASS"
    assert domain.grade(lamp, "#### 1500").verdict.value == "PASS"
    assert domain.grade(lamp, "#### 1501").verdict.value == "FAIL"
