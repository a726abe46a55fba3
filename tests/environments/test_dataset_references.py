"""Published files as they are: references taken out of worked solutions, rows
refused alone (or the file with strict=True), and MBPP's per-row setup columns."""

import json
import logging
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import environments  # noqa: F401  (registers domains)
from environments import datasets, registry

# Worked solutions in the shape of GSM8K's and MATH's answer fields (written here).
WORKED = [
    {"question": "Ann has 3 boxes of 4 pens and buys 6 more pens. How many pens?",
     "answer": "She has 3 * 4 = <<3*4=12>>12 pens in boxes.\n12 + 6 = <<12+6=18>>18\n#### 18"},
    {"question": "A shop sells 1,200 cups a day for 5 days. How many cups?",
     "answer": "1200 * 5 = <<1200*5=6000>>6000\n#### 6000"},
    {"question": "What is half of 7?", "answer": "Half of 7 is 7 / 2.\n#### 3.5"},
]
MATH_ROWS = [
    {"problem": "Simplify $\\frac{2}{4}$.", "solution": "Divide both by 2: $\\boxed{\\frac{1}{2}}$."},
    {"problem": "Compute $2+2$.", "solution": "We get $\\boxed{3}$ first, wrong; in fact $\\boxed{4}$."},
]


def _id() -> str:
    return f"rlpt/dataset-r{uuid.uuid4().hex[:12]}-v0"


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _references(domain_id):
    return [task.hidden for task in registry.domain(domain_id)._tasks]


def test_reference_after_marker_registers_worked_solutions_unmodified(tmp_path):
    path = _jsonl(tmp_path / "w.jsonl", WORKED)
    domain_id = _id()
    datasets.register_file(domain_id, path, "math", fields={"prompt": "question", "answer": "answer"},
                           reference="after:####")
    assert _references(domain_id) == ["18", "6000", "3.5"]
    domain = registry.domain(domain_id)
    task = domain._tasks[0]
    assert domain.grade(task, "The answer is 18.").success
    assert not domain.grade(task, "The answer is 12.").success
    assert domain.refused == ()
    # Without it the math verifier reads a worked solution as it reads an answer: "#### 18" is its
    # final answer statement. Prose over several lines with no statement or box is refused.
    plain = _id()
    datasets.register_file(plain, path, "math", fields={"prompt": "question"})
    assert [task.hidden for task in registry.domain(plain)._tasks] == [r["answer"] for r in WORKED]
    assert [domain.grade(t, "The answer is 18.").success for t in registry.domain(plain)._tasks] == [True, False, False]
    prose = _jsonl(tmp_path / "p.jsonl", [{"question": "q", "answer": "Add 3 and 4 to get 7.\nThen double it: 14"}])
    with pytest.raises(ValueError, match=r"p\.jsonl: line 1: field 'answer'.*no final answer statement or box"):
        datasets.register_file(_id(), prose, "math", fields={"prompt": "question"})


def test_reference_boxed_takes_the_last_box(tmp_path):
    path = _jsonl(tmp_path / "m.jsonl", MATH_ROWS)
    domain_id = _id()
    datasets.register_file(domain_id, path, "math", fields={"prompt": "problem", "answer": "solution"},
                           reference="boxed")
    assert _references(domain_id) == ["\\frac{1}{2}", "4"]


def test_reference_regex_takes_its_group_of_the_last_match(tmp_path):
    rows = [{"prompt": "p1", "answer": "first ANSWER=3; then ANSWER=5"}, {"prompt": "p2", "answer": "ANSWER=7"}]
    domain_id = _id()
    datasets.register_file(domain_id, _jsonl(tmp_path / "r.jsonl", rows), "exact",
                           reference=r"regex:ANSWER=(\d+)")
    assert _references(domain_id) == ["5", "7"]


@pytest.mark.parametrize("reference, message", [
    ("before:####", "must be 'after:<marker>'"),
    ("after:", "must be 'after:<marker>'"),
    ("regex:(a)(b)", "exactly one group, it has 2"),
    ("regex:(unclosed", "not a valid regular expression"),
    (7, "must be a string"),
])
def test_malformed_reference_specs_are_named(tmp_path, reference, message):
    path = _jsonl(tmp_path / "w.jsonl", WORKED)
    with pytest.raises(ValueError, match=message):
        datasets.register_file(_id(), path, "math", fields={"prompt": "question"}, reference=reference)


def test_a_row_without_a_reference_is_refused_alone_and_reported(tmp_path, caplog):
    rows = WORKED + [{"question": "No marker here", "answer": "The solution forgot its final line."},
                     {"question": "Empty after", "answer": "3 + 4 = 7\n####   "}]
    path = _jsonl(tmp_path / "w.jsonl", [dict(r, id=f"t{i}") for i, r in enumerate(rows)])
    domain_id = _id()
    with caplog.at_level(logging.WARNING, logger="environments.datasets"):
        spec = datasets.register_file(domain_id, path, "math", fields={"prompt": "question"},
                                      reference="after:####")
    refused = registry.domain(domain_id).refused
    assert [(r.where, r.id) for r in refused] == [("line 4", "t3"), ("line 5", "t4")]
    assert all("no reference after '####'" in r.reason for r in refused)
    assert "2 rows refused" in caplog.text and "t3" in caplog.text and "strict=True" in caplog.text
    assert "(2 refused)" in spec.description
    assert _references(domain_id) == ["18", "6000", "3.5"]
    stats = datasets.validate_file(path, "math", fields={"prompt": "question"}, reference="after:####")
    assert (stats.rows, len(stats.refused)) == (3, 2)
    with pytest.raises(ValueError, match=r"w\.jsonl: line 4: field 'answer' has no reference after '####'"):
        datasets.register_file(_id(), path, "math", fields={"prompt": "question"}, reference="after:####",
                               strict=True)


def test_an_unusable_reference_refuses_its_row(tmp_path):
    rows = [{"prompt": "p1", "answer": "4"}, {"prompt": "p2", "answer": "no value at all, just words"}]
    domain_id = _id()
    datasets.register_file(domain_id, _jsonl(tmp_path / "u.jsonl", rows), "math")
    [refused] = registry.domain(domain_id).refused
    assert refused.where == "line 2" and "field 'answer'" in refused.reason


def test_description_string_and_dict_carry_reference_and_strict(tmp_path):
    path = _jsonl(tmp_path / "w.jsonl", WORKED)
    domain_id = _id()
    spec = datasets.register(f"{domain_id}={path}:math?prompt=question&reference=after:####")
    assert _references(spec.id) == ["18", "6000", "3.5"]
    # The same description again is the same registration; another reference is another one.
    assert datasets.register(f"{domain_id}={path}:math?prompt=question&reference=after:####", exist_ok=True) == spec
    with pytest.raises(ValueError, match="already registered"):
        datasets.register(f"{domain_id}={path}:math?prompt=question&reference=boxed", exist_ok=True)
    other = datasets.register({"id": _id(), "path": str(path), "fields": {"prompt": "question"},
                               "reference": "after:####", "strict": True})
    assert _references(other.id) == ["18", "6000", "3.5"]


def test_reference_extraction_refuses_structured_answer_kinds(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", [{"prompt": "p", "answer": ["assert f(1) == 2"]}])
    with pytest.raises(ValueError, match="takes its answer field as it is"):
        datasets.load_tasks(path, "code", reference="after:####")


def test_setup_and_import_columns_reach_the_row(tmp_path):
    from environments.datasets import loaders

    rows = [
        {"prompt": "a", "answer": "1", "test_setup_code": "import math", "test_imports": ["import os", "import re"]},
        {"prompt": "b", "answer": "2", "test_setup_code": "", "test_imports": []},
        {"prompt": "c", "answer": "3"},
        {"prompt": "d", "answer": "4", "test_setup_code": None, "test_imports": "import sys"},
    ]
    for path in (_jsonl(tmp_path / "s.jsonl", rows), tmp_path / "s.parquet"):
        if path.suffix == ".parquet":
            table = pa.Table.from_pylist([dict(r, test_imports=r.get("test_imports") if isinstance(
                r.get("test_imports"), list) else ([r["test_imports"]] if r.get("test_imports") else None))
                for r in rows])
            pq.write_table(table, path)
        got = [(r.test_setup_code, r.test_imports) for r in loaders.iter_rows(
            path, loaders.detect_format(path), datasets._fields(None))]
        assert got == [("import math", "import os\nimport re"), (None, None), (None, None), (None, "import sys")]
    bad = _jsonl(tmp_path / "b.jsonl", [{"prompt": "a", "answer": "1", "test_imports": ["import os", 3]}])
    with pytest.raises(ValueError, match=r"b\.jsonl: line 1: field 'test_imports'.*list of strings"):
        datasets.load_tasks(bad, "math")
