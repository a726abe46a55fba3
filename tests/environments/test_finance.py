"""The finance family: number normalisation, the published sets' loaders (on
tiny files in their formats written here), generated PDF reports, and answers
that must earn nothing."""

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import gymnasium
import numpy as np
import pytest

import environments  # noqa: F401  (registers every domain)
from environments import bounded, registry
from environments.families import finance
from environments.finance import answers, program, reports
from environments.finance.answers import Reference, grade
from environments.finance.numbers import Number, parse_number

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT_IDS = [s.id for s in registry.list_domains(family="finance", tag="pdf")]  # the generated reports


@pytest.mark.parametrize("text,want", [
    ("$1,234.5", Number(1234.5, "", 1)), ("(1,234)", Number(-1234.0)), ("-12.5%", Number(-12.5, "percent", 1)),
    ("3.2 million", Number(3.2, "million", 1)), ("$(15)", Number(-15.0)), ("(12.5%)", Number(-12.5, "percent", 1)),
    ("$-5", Number(-5.0)), ("4.1m", Number(4.1, "million", 1)), ("  7. ", Number(7.0)), ("2 bn", Number(2, "billion")),
    ("1,234.50", Number(1234.5, "", 2)),
    ("12 or 13", None), ("1,23", None), ("--3", None), ("(5", None), ("abc", None), ("", None), ("5 apples", None),
    ("1 2 3", None), ("12%%", None),
])
def test_parse_number(text, want):
    assert parse_number(text) == want


def test_numbers_compare_in_base_units_with_finqa_tolerance():
    ratio = Reference("number", 0.14136, "percent")  # FinQA: exe_ans 0.14136, answer "14.1%"
    for ok in ("0.14136", "14.136%", "14.14", "14.1%", "14.136 %"):
        assert grade(ratio, ok).verdict.value == "PASS", ok
    for bad in ("14", "0.15", "-14.136%", "1413.6"):
        assert grade(ratio, bad).verdict.value == "FAIL", bad
    amount = Reference("number", 1.2345e9, "million")  # a table "in millions": 1,234.5
    for ok in ("1,234.5", "$1,234.5 million", "1.2345 billion", "1234500000", "$1.23 billion", "1,235"):
        assert grade(amount, ok).verdict.value == "PASS", ok
    for bad in ("1,234.5 thousand", "1,236", "1.2 billion", "1,234.6"):  # off by more than the digits written
        assert grade(amount, bad).verdict.value == "FAIL", bad
    assert grade(Reference("number", 2019.0), "2018").verdict.value == "FAIL"  # a year is not within 0.5%
    assert grade(Reference("number", -30e3, "thousand"), "(30)").verdict.value == "PASS"
    assert grade(Reference("number", 0.0), "0.000004").verdict.value == "PASS"  # FinQA's 5 decimals
    assert grade(Reference("number", 0.0), "0.00001").verdict.value == "FAIL"
    count = Reference("count", 12.0)
    assert [grade(count, a).verdict.value for a in ("12", "12.0", "11.99", "twelve")] == [
        "PASS", "PASS", "FAIL", "MALFORMED"]


def test_answers_that_dump_candidates_or_are_malformed_earn_nothing():
    num = Reference("number", 42e6, "million")
    for dump in ("42 43 44", "41, 42, 43", "[41, 42, 43]", "42 or 43", "PASS", "The answer is 42 (probably)"):
        g = grade(num, dump)
        assert g.verdict.value == "MALFORMED" and g.reward == 0 and "expected one number" in g.feedback, dump
    assert grade(num, "").verdict.value == "MALFORMED"
    yes = Reference("yesno", "yes")
    assert [grade(yes, a).verdict.value for a in ("Yes.", "no", "yes no")] == ["PASS", "FAIL", "MALFORMED"]
    spans = Reference("spans", (Reference("span", "Cost of sales"), Reference("number", 2019.0)))
    assert grade(spans, '["2019", "cost of sales"]').verdict.value == "PASS"
    assert grade(spans, "Cost of sales; 2019").verdict.value == "PASS"
    assert grade(spans, '["2019", "cost of sales", "Revenue"]').feedback == "expected 2 items, got 3"
    assert grade(spans, '["2019", "revenue"]').verdict.value == "FAIL"
    assert grade(Reference("span", "Cost of sales"), "the cost of sales.").verdict.value == "PASS"
    assert grade(Reference("span", "Cost of sales"), "Cost of sales; Revenue").verdict.value == "FAIL"


def test_json_fields_exact_keys_field_by_field():
    ref = Reference("fields", (("company", Reference("span", "Acme Group")),
                               ("revenue", Reference("number", 1234e6, "million")),
                               ("margin", Reference("number", 0.125, "percent"))))
    assert grade(ref, answers.demonstrate(ref)).verdict.value == "PASS"
    assert grade(ref, '{"company": "acme group", "revenue": "$1,234", "margin": "12.5%"}').verdict.value == "PASS"
    extra = grade(ref, '{"company": "Acme Group", "revenue": 1234, "margin": 12.5, "revenue_alt": 999}')
    assert (extra.verdict.value, extra.reward) == ("FAIL", 0.0) and "unexpected ['revenue_alt']" in extra.feedback
    listed = grade(ref, '{"company": "Acme Group", "revenue": [1234, 999], "margin": 12.5}')
    assert listed.verdict.value == "FAIL" and listed.feedback == "wrong fields: ['revenue']" and listed.reward < 0.5
    assert grade(ref, '{"company": "Acme Group"}').verdict.value == "FAIL"
    bad = grade(ref, "{company: Acme}")
    assert bad.verdict.value == "MALFORMED" and "not JSON" in bad.feedback
    assert grade(ref, "[1, 2]").verdict.value == "MALFORMED"


def test_finqa_programs_execute_as_evaluate_py():
    table = [["", "2020", "2019"], ["revenue", "$ 120", "$ 100"]]
    assert program.execute("subtract(120, 100), divide(#0, 100)", table) == 0.2
    assert program.execute("table_average(revenue, none)", table) == 110.0
    assert program.execute("greater(5%, const_m1)", table) == "yes"
    assert program.execute("120", table) == 120.0
    for bad, why in (("divide(1, 0)", "division"), ("add(#3, 1)", "not an earlier step"),
                     ("table_max(profit, none)", "does not have"), ("sqrt(4, 2)", "unknown operation")):
        with pytest.raises(program.ProgramError, match=why):
            program.execute(bad, table)


def test_finqa_program_arguments_split_as_evaluate_py_tokenizes():
    # evaluate.py splits a program at ", ": a thousands comma stays in its number
    # (str_to_num drops it) and a row name may hold a comma without a space.
    table = [["", "2020", "2019"], ["sales,net", "1,200", "1,000"]]
    assert program.execute("add(1,234, 5)", table) == 1239.0
    assert program.execute("subtract(1,200, 1,000), divide(#0, 1,000)", table) == 0.2
    assert program.execute("table_sum(sales,net, none)", table) == 2200.0
    assert program.execute("add(1,2)", table) == 3.0  # no space: still two arguments
    with pytest.raises(program.ProgramError, match="3 arguments"):
        program.execute("add(1, 2, 3)", table)


_TABLE = [["", "2020", "2019"], ["revenue", "$ 120", "$ 100"], ["cost", "$ 60", "$ 50"]]


def _finqa(qa, ident):
    return {"id": ident, "pre_text": ["acme sold widgets ."], "post_text": ["all figures in millions ."],
            "table": _TABLE, "qa": qa}


@pytest.fixture
def registered():
    ids = []

    def register(domain_id, source, path):
        ids.append(finance.register_source(domain_id, source, path).id)
        return registry.domain(domain_id)
    yield register
    for d in ids:
        registry.unregister(d)


def _check(domain, answers_by_key):
    """Every task: its demonstration PASSes through gymnasium, the given wrong answer FAILs."""
    for task in domain._tasks:
        assert domain.grade(task, task.demonstration).verdict.value == "PASS", task.key
        wrong = answers_by_key[task.key]
        assert domain.grade(task, wrong).verdict.value == "FAIL", (task.key, wrong)


def test_finqa_as_published_with_refusals(tmp_path, registered):
    folder = tmp_path / "dataset"
    folder.mkdir()
    train = [_finqa({"question": "growth of revenue?", "program": "subtract(120, 100), divide(#0, 100)",
                     "exe_ans": 0.2, "answer": "20%"}, "A/2020/page_1.pdf-1"),
             _finqa({"question": "total revenue?", "program": "table_sum(revenue, none)", "exe_ans": 220.0,
                     "answer": "220"}, "A/2020/page_1.pdf-2"),
             _finqa({"question": "mismatch", "program": "add(1, 2)", "exe_ans": 4.0}, "A/2020/page_1.pdf-3"),
             _finqa({"question": "no answer", "program": "add(1, 2)"}, "A/2020/page_1.pdf-4")]
    dev = [_finqa({"question": "did revenue grow?", "program": "greater(120, 100)", "exe_ans": "yes"},
                  "A/2020/page_2.pdf-1")]
    (folder / "train.json").write_text(json.dumps(train))
    (folder / "dev.json").write_text(json.dumps(dev))
    domain = registered("rlpt/finance-finqatest-v0", "finqa", folder)
    assert domain.split_sizes() == {"train": 2, "eval": 1}
    assert [(r.where, r.id) for r in domain.refused] == [("train.json: row 3", "A/2020/page_1.pdf-3"),
                                                         ("train.json: row 4", "A/2020/page_1.pdf-4")]
    assert "gives 3.0, the published answer is 4.0" in domain.refused[0].reason
    assert "no published answer" in domain.refused[1].reason
    _check(domain, {"finqa:A/2020/page_1.pdf-1": "0.25", "finqa:A/2020/page_1.pdf-2": "200",
                    "finqa:A/2020/page_2.pdf-1": "no"})
    env = gymnasium.make("rlpt/finance-finqatest-v0")
    obs, info = env.reset(seed=0, options={"split": "eval"})
    assert "revenue | $ 120 | $ 100" in obs and "acme sold widgets" in obs and obs.endswith("A: ")
    assert env.step(info["demonstration"])[4]["verdict"] == "PASS"


def test_tatqa_answer_types_and_scales(tmp_path, registered):
    q = [("span", ["Revenue"], "", "What line grew?", "Net loss"),
         ("multi-span", ["Revenue", "Net loss"], "", "Which lines?", '["Revenue"]'),
         ("arithmetic", 200, "thousand", "Change in revenue?", "20"),
         ("arithmetic", 20, "percent", "Growth rate?", "0.21"),
         ("count", "2", "", "How many lines?", "3"),
         ("span", ["(30)"], "thousand", "Net loss in 2019?", "30"),
         ("arithmetic", None, "", "Unanswered?", ""),
         ("other", "x", "", "Odd type?", "")]
    questions = [{"uid": f"q{i}", "order": i, "question": text, "answer": ans, "answer_type": kind, "scale": scale}
                 for i, (kind, ans, scale, text, _) in enumerate(q)]
    data = [{"table": {"uid": "t1", "table": [["", "2019", "2018"], ["Revenue", "1,200", "1,000"],
                                              ["Net loss", "(30)", "(20)"]]},
             "paragraphs": [{"uid": "p1", "order": 1, "text": "Amounts in thousands."}], "questions": questions}]
    path = tmp_path / "tatqa_dataset_dev.json"
    path.write_text(json.dumps(data))
    domain = registered("rlpt/finance-tatqatest-v0", "tatqa", path)
    assert [(r.id, r.reason) for r in domain.refused] == [
        ("q6", "no published answer"), ("q7", "answer_type 'other' is not span, multi-span, arithmetic or count")]
    assert domain.split_sizes() == {"train": 0, "eval": 6}
    _check(domain, {f"tatqa:q{i}": wrong for i, (*_, wrong) in enumerate(q[:6])})
    by_key = {t.key: t for t in domain._tasks}
    for key, ok in (("tatqa:q2", "$200 thousand"), ("tatqa:q2", "200,000"), ("tatqa:q3", "20%"),
                    ("tatqa:q3", "0.2"), ("tatqa:q5", "-30"), ("tatqa:q1", "net loss\nrevenue")):
        assert domain.grade(by_key[key], ok).verdict.value == "PASS", (key, ok)
    assert "Revenue | 1,200 | 1,000" in by_key["tatqa:q0"].prompt


def _conversation(ident):
    return {"id": ident, "pre_text": ["acme ."], "post_text": [], "table": _TABLE,
            "annotation": {"dialogue_break": ["revenue in 2020?", "and in 2019?", "what was the change?"],
                           "turn_program": ["120", "100", "subtract(120, 100)"], "exe_ans_list": [120, 100, 20],
                           "qa_split": [0, 0, 0]}}


def test_convfinqa_zip_and_turn_files(tmp_path, registered):
    broken = _conversation("Single_B/2020/page_1.pdf-1")
    broken["annotation"]["exe_ans_list"] = [120, 100, 25]
    archive = tmp_path / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("data/train.json", json.dumps([_conversation("Single_A/2020/page_1.pdf-1"), broken]))
        z.writestr("data/dev.json", json.dumps([_conversation("Single_C/2020/page_1.pdf-1")]))
    domain = registered("rlpt/finance-convfinqatest-v0", "convfinqa", archive)
    assert domain.split_sizes() == {"train": 5, "eval": 3}
    assert [(r.id, r.where) for r in domain.refused] == [("Single_B/2020/page_1.pdf-1#2", "data/train.json: row 2, turn 2")]
    last = next(t for t in domain._tasks if t.key == "convfinqa:Single_A/2020/page_1.pdf-1#2")
    assert "Q: revenue in 2020?\nA: 120\nQ: and in 2019?\nA: 100\nQ: what was the change?" in last.prompt
    _check(domain, {t.key: "999" for t in domain._tasks})
    turn = dict(_conversation("Single_D/2021/page_1.pdf-1"), cur_dial=["revenue in 2020?", "and in 2019?"],
                turn_ind=1, exe_ans=100, cur_program="100")
    path = tmp_path / "dev_turn.json"
    path.write_text(json.dumps([turn]))
    one = registered("rlpt/finance-convturntest-v0", "convfinqa", path)
    assert [t.demonstration for t in one._tasks] == ["100"]
    # data.zip unzipped: its conversation files only, not their turns again from *_turn.json
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "dev.json").write_text(json.dumps([_conversation("Single_D/2021/page_1.pdf-1")]))
    (folder / "dev_turn.json").write_text(json.dumps([turn]))
    (folder / "test_private.json").write_text(json.dumps([{"id": "Single_E/2021/page_1.pdf-1"}]))
    unzipped = registered("rlpt/finance-convfoldertest-v0", "convfinqa", folder)
    assert unzipped.split_sizes()["eval"] == 3 and not unzipped.refused


def test_file_problems_and_all_refused_raise(tmp_path):
    bad = tmp_path / "train.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON file"):
        finance.register_source("rlpt/finance-bad-v0", "finqa", bad)
    bad.write_text(json.dumps([_finqa({"question": "q", "program": "add(1, 2)"}, "x")]))
    with pytest.raises(ValueError, match="no row of the finqa file.*no published answer"):
        finance.register_source("rlpt/finance-bad-v0", "finqa", bad)
    with pytest.raises(ValueError, match="no such file"):
        finance.register_source("rlpt/finance-bad-v0", "tatqa", tmp_path / "missing.json")
    with pytest.raises(ValueError, match="unknown finance source"):
        finance.register_source("rlpt/finance-bad-v0", "finqb", bad)
    assert not registry.is_registered("rlpt/finance-bad-v0")


def _wrong(ref):
    if ref.kind == "fields":
        return json.dumps({name: "Nobody" if sub.kind == "span" else -1 for name, sub in ref.value})
    if ref.kind == "span":
        return "Nonexistent Segment"
    return answers.demonstrate(Reference(ref.kind, ref.value * 2 + 7e6, ref.unit))


@pytest.mark.parametrize("domain_id", REPORT_IDS)
def test_generated_report_reference_passes_and_wrong_fails(domain_id):
    env = gymnasium.make(domain_id)
    obs, info = env.reset(seed=3)
    assert obs.startswith("--- page 1 ---") and len(obs) <= registry.get(domain_id).max_prompt_chars
    assert env.step(info["demonstration"])[4]["verdict"] == "PASS"
    ref = env.unwrapped.task.hidden
    for answer, verdict in ((_wrong(ref), "FAIL"), ("", "MALFORMED"), ("@@@ ???", "MALFORMED")):
        env.reset(seed=3)
        _, reward, _, _, step = env.step(answer)
        assert (step["verdict"], reward == 0) == (verdict, True), (answer, step)


def test_report_pdf_has_ruled_and_borderless_tables_and_chart_labels_only_as_text():
    report = reports.draw(np.random.default_rng(5), "hard")
    text = finance._text(report)
    assert text.count("--- page") >= 4
    ruled, borderless = report.table("Consolidated statements of income"), report.table("Revenue by segment")
    label, values = ruled.rows[0]
    assert f"{label} | " + " | ".join(reports.money(v) for v in values) in text
    name, values = borderless.rows[0]
    assert f"{name} " + " ".join(reports.money(v) for v in values) in text
    bars, line = report.charts()
    assert all(reports.money(v) in text for v in bars.values)
    assert all(reports.percent(v) in text for v in line.values)
    assert all(quarter in text for quarter in bars.labels)


def test_generated_reports_are_deterministic():
    from environments.finance import pdf
    a, b = (reports.draw(np.random.default_rng(11), "medium") for _ in range(2))
    assert a == b and pdf.render(a) == pdf.render(b)
    # Another process (another hash seed) makes the same bytes: no date, id or set order leaks in.
    code = ("import hashlib, numpy as np; from environments.finance import pdf, reports; "
            "print(hashlib.sha256(pdf.render(reports.draw(np.random.default_rng(11), 'medium'))).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "123"}, cwd=ROOT).stdout.strip()
    assert out == hashlib.sha256(pdf.render(a)).hexdigest()
    first = gymnasium.make("rlpt/finance-report-chart-medium-v0").reset(seed=4)[0]
    finance._text.cache_clear()
    assert gymnasium.make("rlpt/finance-report-chart-medium-v0").reset(seed=4)[0] == first
    assert gymnasium.make("rlpt/finance-report-chart-medium-v0").reset(seed=5)[0] != first


def test_infrastructure_failures_are_not_the_models_fail(monkeypatch):
    from environments.finance import pdf
    finance._text.cache_clear()
    monkeypatch.setattr(pdf, "text_of", lambda data: (_ for _ in ()).throw(OSError("pdfplumber crashed")))
    with pytest.raises(OSError, match="pdfplumber crashed"):  # the reset fails: no task, nothing scored
        gymnasium.make("rlpt/finance-report-cell-easy-v0").reset(seed=9)
    monkeypatch.undo()
    env = gymnasium.make("rlpt/finance-report-cell-easy-v0")
    env.reset(seed=9)
    monkeypatch.setattr(answers, "grade", lambda ref, answer: 1 / 0)
    _, reward, _, _, info = env.step("12")
    assert (info["verdict"], reward, info["infra_error"]) == ("VERIFIER_ERROR", 0.0, True)


def test_bounded_cut_refuses_report_domains_without_drawing():
    with pytest.raises(ValueError, match="at least 900 characters"):
        bounded.register_bounded("rlpt/finance-report-cell-easy-v0", 256)


def test_benchmark_rows_on_a_published_file(tmp_path):
    from benchmarks import domains_finance
    data = [_finqa({"question": "total revenue?", "program": "table_sum(revenue, none)", "exe_ans": 220.0},
                   f"A/2020/page_1.pdf-{i}") for i in range(3)]
    data.append(_finqa({"question": "growth?", "program": "subtract(120, 100), divide(#0, 100)", "exe_ans": 0.2},
                       "A/2020/page_1.pdf-9"))
    data.append(_finqa({"question": "no answer"}, "A/2020/page_1.pdf-10"))
    path = tmp_path / "test.json"
    path.write_text(json.dumps(data))
    row = domains_finance.public_row("finqa", str(path))
    assert (row["graded"], row["ref_pass"], row["refused"]) == (4, 1.0, 1)
    assert row["refused_by_reason"] == {"no published answer (qa.exe_ans)": 1}
    assert (row["wrongs"], row["wrong_pass"], row["dump_pass"]) == (2, 0, 0) and row["grade_p99_ms"] > 0
    assert not registry.is_registered("rlpt/finance-finqa-bench-v0")


def test_without_the_finance_extra_a_report_reset_names_it(monkeypatch):
    finance._text.cache_clear()
    for name in ("reportlab", "reportlab.platypus", "reportlab.lib", "matplotlib", "matplotlib.figure", "pdfplumber"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"finance extra: pip install 'rlpt-environments\[finance\]'"):
        gymnasium.make("rlpt/finance-report-chart-easy-v0").reset(seed=123)


def test_statement_rung_longest_prompt_fits_its_bound():
    """The brief rung's widest statement (longest company name, six-character
    amounts in every cell, the longest label asked) fits the bound its spec
    promises and the mixed job's context is sized for."""
    spec = registry.get("rlpt/finance-statement-cell-easy-v0")
    domain = registry.domain(spec.id)
    name = f"{max(reports._NAMES, key=len)} {max(reports._SUFFIXES, key=len)}"
    wide = (25_000.0, 20_000.0)  # the largest revenue drawn (20,000, grown 25%); every other cell is smaller
    table = reports.Table("Income ($ millions)", (2025, 2024), tuple((r, wide) for r in reports.STATEMENT_ROWS), True)
    report = reports.Report(name, 2025, (reports.Paragraph(f"{name}, fiscal 2025", heading=True), table))
    label = max(reports.STATEMENT_ROWS, key=len)
    prompt = domain._prompt(finance._text(report), f"{label}, fiscal 2024?", None)
    assert f"{label} | 25,000 | 20,000" in prompt and len(prompt) <= spec.max_prompt_chars == 240
    rng = np.random.default_rng(0)
    for _ in range(50):  # drawn ones: the net income may be negative, "(250)" at most
        r = reports.statement(rng)
        assert all(v >= -250 and max(row[1]) <= 25_000 for row in r.tables()[0].rows for v in row[1])
