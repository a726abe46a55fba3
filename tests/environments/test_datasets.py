"""Dataset domains: file formats, validation errors, splits, verifiers, gymnasium."""

import json
import re
import time
import tracemalloc
import uuid

import gymnasium
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import environments  # noqa: F401  (registers domains)
from environments import datasets, registry, splits
from environments.datasets import verifiers

ROWS = [{"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(40)]


def _id() -> str:
    return f"rlpt/dataset-t{uuid.uuid4().hex[:12]}-v0"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_hf(folder, rows, shards=2):
    """The layout of `datasets.Dataset.save_to_disk`: Arrow IPC stream shards
    listed in state.json's "_data_files", next to dataset_info.json."""
    folder.mkdir()
    table = pa.Table.from_pylist(rows)
    names = [f"data-{i:05d}-of-{shards:05d}.arrow" for i in range(shards)]
    per = -(-len(rows) // shards)
    for i, name in enumerate(names):
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(i * per, per), max_chunksize=7)
    features = {k: {"dtype": "string", "_type": "Value"} for k in rows[0]}
    (folder / "dataset_info.json").write_text(json.dumps(
        {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}))
    (folder / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": n} for n in names], "_fingerprint": "0123456789abcdef",
        "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
        "_output_all_columns": False, "_split": None}))
    return folder


def write_all(tmp_path, rows):
    jsonl = write_jsonl(tmp_path / "d.jsonl", rows)
    js = tmp_path / "d.json"
    js.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=9)
    arrow = tmp_path / "d.arrow"
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, pa.Table.from_pylist(rows).schema) as w:
        w.write_table(pa.Table.from_pylist(rows))
    return [jsonl, js, parquet, arrow, write_hf(tmp_path / "hf", rows)]


def test_every_format_loads_the_same_tasks(tmp_path):
    loaded = [datasets.load_tasks(p, "math") for p in write_all(tmp_path, ROWS)]
    assert len(loaded[0]) == len(ROWS)
    assert [t.prompt for t, _ in loaded[0]] == [r["prompt"] for r in ROWS]
    for other in loaded[1:]:
        assert other == loaded[0]


def test_field_mapping_and_system_prompt(tmp_path):
    rows = [{"uid": 7, "question": "2+2?", "solution": 4, "sys": "Be brief.", "part": "test"}]
    path = write_jsonl(tmp_path / "m.jsonl", rows)
    fields = {"prompt": "question", "answer": "solution", "id": "uid", "system": "sys", "split": "part"}
    [(task, split)] = datasets.load_tasks(path, "math", fields=fields)
    assert (task.key, task.prompt, task.hidden, split) == ("7", "Be brief.\n\n2+2?", "4", "eval")
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + _line({"prompt": "p", "answer": "1"}))
    assert len(datasets.load_tasks(bom, "math")) == 1
    with pytest.raises(ValueError, match="unknown field names"):
        datasets.load_tasks(path, "math", fields={"question": "prompt"})


def _bad(tmp_path, name, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _line(row) -> bytes:
    return (json.dumps(row) + "\n").encode()


GOOD = _line({"id": "a", "prompt": "p", "answer": "1"})
BAD_FILES = {
    "misspelt field": ("x.jsonl", GOOD + _line({"id": "b", "promt": "p", "answer": "1"}),
                       r"x\.jsonl: line 2: missing field 'prompt'.*did you mean 'promt'"),
    "missing answer": ("x.jsonl", _line({"prompt": "p"}), r"x\.jsonl: line 1: missing field 'answer'"),
    "empty file": ("x.jsonl", b"\n\n", r"x\.jsonl: empty file"),
    "empty json list": ("x.json", b"[]", r"x\.json: empty file"),
    "prompt not a string": ("x.jsonl", GOOD + _line({"id": "b", "prompt": 5, "answer": "1"}),
                            r"x\.jsonl: line 2: field 'prompt' \(the prompt\) must be str, got int"),
    "answer a list": ("x.json", json.dumps([{"prompt": "p", "answer": [1]}]).encode(),
                      r"x\.json: row 1: field 'answer' \(the answer\) must be str or int or float"),
    "duplicate ids": ("x.jsonl", GOOD + GOOD, r"x\.jsonl: line 2: duplicate id 'a' in field 'id'"),
    "id missing on a later row": ("x.jsonl", GOOD + _line({"prompt": "q", "answer": "1"}),
                                  r"x\.jsonl: line 2: missing field 'id'"),
    "invalid utf-8": ("x.jsonl", GOOD + b'{"prompt": "\xff", "answer": "1"}\n', r"x\.jsonl: line 2: invalid UTF-8"),
    "invalid utf-8 json": ("x.json", b'[\n{"prompt": "\xff", "answer": "1"}]', r"x\.json: line 2: invalid UTF-8"),
    "malformed json line": ("x.jsonl", GOOD + b'{"prompt": "p", "answer": }\n', r"x\.jsonl: line 2: malformed JSON"),
    "not an object": ("x.jsonl", b"[1, 2]\n", r"x\.jsonl: line 1: expected a JSON object"),
    "bad split value": ("x.jsonl", _line({"prompt": "p", "answer": "1", "split": "dev"}),
                        r"x\.jsonl: line 1: field 'split' is 'dev'"),
    "null answer": ("x.jsonl", _line({"prompt": "p", "answer": None}), r"x\.jsonl: line 1: field 'answer' \(the answer\) is null"),
    "empty prompt": ("x.jsonl", _line({"prompt": "  ", "answer": "1"}), r"x\.jsonl: line 1: field 'prompt'.*is empty"),
    "unparsable math reference": ("x.jsonl", _line({"prompt": "p", "answer": "seven-ish"}),
                                  r"x\.jsonl: line 1: field 'answer': reference 'seven-ish' is not a math value"),
    "unknown suffix": ("x.csv", GOOD, r"x\.csv: cannot tell the format"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_get_clear_errors(tmp_path, case):
    name, content, message = BAD_FILES[case]
    path = _bad(tmp_path, name, content)
    with pytest.raises(ValueError, match=message):
        datasets.load_tasks(path, "math")


def test_bad_columnar_files(tmp_path):
    parquet = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "p", "answer": "1"}]), parquet)
    with pytest.raises(ValueError, match=r"x\.parquet: row 1: missing field 'prompt'"):
        datasets.load_tasks(parquet, "math")
    # Row numbers run on across shards: the duplicate is row 4, in the second shard.
    hf = write_hf(tmp_path / "hf", [{"prompt": "p", "answer": str(i), "id": x} for i, x in enumerate("abca")])
    with pytest.raises(ValueError, match=r"hf: row 4: duplicate id 'a' in field 'id'"):
        datasets.load_tasks(hf, "math")
    with pytest.raises(ValueError, match="not a readable Parquet"):
        datasets.load_tasks(_bad(tmp_path, "y.parquet", b"nope"), "math")
    with pytest.raises(ValueError, match="unknown verifier kind 'maths'; known kinds: .*'math'"):
        datasets.load_tasks(write_jsonl(tmp_path / "ok.jsonl", ROWS), "maths")
    with pytest.raises(ValueError, match="no such file"):
        datasets.load_tasks(tmp_path / "absent.jsonl", "math")


def test_validation_streams_in_bounded_memory(tmp_path):
    path = tmp_path / "big.jsonl"
    filler = "x" * 1000
    with open(path, "w", encoding="utf-8") as f:
        for i in range(50_000):
            f.write(json.dumps({"id": i, "prompt": f"{filler} {i}?", "answer": str(i)}) + "\n")
    size = path.stat().st_size
    assert size > 50_000_000
    start = time.monotonic()
    tracemalloc.start()
    try:
        stats = datasets.validate_file(path, "exact")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.rows == 50_000 and stats.train + stats.eval == 50_000
    assert peak < size / 5, (peak, size)
    assert time.monotonic() - start < 60


def test_hash_split_is_disjoint_and_stable_when_rows_are_appended(tmp_path):
    rows = [{"id": f"r{i}", "prompt": f"p{i}", "answer": "1"} for i in range(300)]
    first = {t.key: s for t, s in datasets.load_tasks(write_jsonl(tmp_path / "a.jsonl", rows), "exact")}
    more = rows + [{"id": f"r{i}", "prompt": f"p{i}", "answer": "1"} for i in range(300, 400)]
    second = {t.key: s for t, s in datasets.load_tasks(write_jsonl(tmp_path / "b.jsonl", more), "exact")}
    assert all(second[k] == s for k, s in first.items())
    assert 0 < sum(s == "eval" for s in second.values()) < 100
    assert all(splits.split_of(k) == s for k, s in second.items())
    # Without ids the prompt is hashed.
    no_ids = [{"prompt": r["prompt"], "answer": "1"} for r in rows]
    by_prompt = datasets.load_tasks(write_jsonl(tmp_path / "c.jsonl", no_ids), "exact")
    assert all(splits.split_of(t.prompt) == s for t, s in by_prompt)


def test_reset_is_deterministic_and_respects_the_split_field(tmp_path):
    rows = [{"id": str(i), "prompt": f"p{i}", "answer": str(i), "split": "train" if i % 3 else "test"}
            for i in range(30)]
    spec = datasets.register_file(_id(), write_jsonl(tmp_path / "s.jsonl", rows), verifier="exact")
    env = gymnasium.make(spec.id)
    seen = {}
    for split, want in (("train", lambda i: i % 3 != 0), ("eval", lambda i: i % 3 == 0)):
        for seed in range(20):
            obs, info = env.reset(seed=seed, options={"split": split})
            assert want(int(obs[1:]))
            assert env.reset(seed=seed, options={"split": split})[0] == obs
            seen[(split, seed)] = obs
    assert len({v for (s, _), v in seen.items() if s == "train"}) > 5
    only_train = datasets.register_file(_id(), write_jsonl(tmp_path / "t.jsonl", rows[1:3]), verifier="exact")
    with pytest.raises(ValueError, match="no 'eval' rows"):
        gymnasium.make(only_train.id).reset(seed=0, options={"split": "eval"})


def test_gymnasium_make_registered_file_domain(tmp_path):
    rows = [{"id": f"w{i}", "prompt": f"Compute {i}/4.", "answer": f"\\frac{{{i}}}{{4}}"} for i in range(1, 30)]
    domain_id = _id()
    spec = datasets.register_file(domain_id, write_jsonl(tmp_path / "w.jsonl", rows), verifier="math",
                                  difficulty="hard", tags=("fractions",))
    assert (spec.family, spec.difficulty) == ("dataset", "hard") and "fractions" in spec.tags
    assert spec in registry.list_domains(family="dataset")
    env = gymnasium.make(domain_id)
    obs, info = env.reset(seed=3)
    i = int(re.search(r"Compute (\d+)", obs).group(1))
    assert info["demonstration"] == f"\\frac{{{i}}}{{4}}"
    _, reward, terminated, _, step = env.step(f"Working...\nAnswer: {i / 4}")
    assert (reward, terminated, step["verdict"]) == (1.0, True, "PASS")
    env.reset(seed=3)
    assert env.step(f"The answer is {i + 1}/4")[4]["verdict"] == "FAIL"
    env.reset(seed=3)
    assert env.step("no idea")[4]["verdict"] == "MALFORMED"
    with pytest.raises(ValueError, match="already registered"):
        datasets.register_file(domain_id, tmp_path / "w.jsonl")
    with pytest.raises(ValueError, match="must look like"):
        datasets.register_file("rlpt/math-mine-v0", tmp_path / "w.jsonl")


def test_plain_data_descriptions(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "Pick.", "answer": "C"}])
    domain_id = _id()
    assert datasets.parse_description(f"{domain_id}={path}:choice") == {
        "domain_id": domain_id, "path": str(path), "verifier": "choice"}
    assert datasets.parse_description(f"{domain_id}={path}")["verifier"] == "math"
    spec = datasets.register(f"{domain_id}={path}:choice")
    env = gymnasium.make(spec.id)
    env.reset(seed=0)
    assert env.step("The answer is (C).")[4]["verdict"] == "PASS"
    spec2 = datasets.register({"id": _id(), "path": str(path), "verifier": "choice",
                               "options": {"letters": "ABCDE"}, "difficulty": "easy"})
    assert spec2.difficulty == "easy"
    with pytest.raises(ValueError, match="known kinds"):
        datasets.parse_description(f"{_id()}={path}:chioce")
    with pytest.raises(ValueError, match="has no options"):
        datasets.register({"id": _id(), "path": str(path), "verifier": "choice", "options": {"letter": "AB"}})
    with pytest.raises(ValueError, match="needs 'id' and 'path'"):
        datasets.register({"path": str(path)})


def test_description_maps_fields_and_registers_once_per_file(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "q.jsonl", [{"question": f"{i} + 1?", "solution": str(i + 1)}
                                              for i in range(20)])
    domain_id = _id()
    desc = f"{domain_id}={path}:numeric?prompt=question&answer=solution"
    assert datasets.parse_description(desc) == {
        "domain_id": domain_id, "path": str(path), "verifier": "numeric",
        "fields": {"prompt": "question", "answer": "solution"}}
    spec = datasets.register(desc, exist_ok=True)
    # The same description again, and the same file by a relative path, are that domain.
    monkeypatch.chdir(tmp_path)
    assert datasets.register(f"{domain_id}=q.jsonl:numeric?prompt=question&answer=solution",
                             exist_ok=True) is spec
    with pytest.raises(ValueError, match="already registered"):
        datasets.register(desc)  # exist_ok is off by default
    other = write_jsonl(tmp_path / "r.jsonl", [{"question": "1?", "solution": "1"}])
    with pytest.raises(ValueError, match=f"already registered.*q.jsonl.*another id for {re.escape(str(other))}"):
        datasets.register(f"{domain_id}={other}:numeric?prompt=question&answer=solution", exist_ok=True)
    with pytest.raises(ValueError, match="already registered"):  # same file, another verifier
        datasets.register(f"{domain_id}={path}:exact?prompt=question&answer=solution", exist_ok=True)
    with pytest.raises(ValueError, match="already registered.*arith-easy.jsonl"):
        datasets.register({"id": "rlpt/dataset-arith-easy-v0", "path": str(path)}, exist_ok=True)
    with pytest.raises(ValueError, match="already registered .not from a file"):
        datasets.register(f"rlpt/math-add-easy-v0={path}", exist_ok=True)
    for bad in (f"{_id()}={path}?question", f"{_id()}={path}?promt=question", "=x.jsonl"):
        with pytest.raises(ValueError, match="field=column|must look like"):
            datasets.parse_description(bad)


def test_builtin_arith_domains_are_registered():
    ids = {s.id for s in registry.list_domains(family="dataset", tag="word-problem")}
    assert ids >= {f"rlpt/dataset-arith-{d}-v0" for d in registry.DIFFICULTIES}
    for domain_id in sorted(ids):
        sizes = registry.domain(domain_id).split_sizes()
        assert sizes["train"] + sizes["eval"] == 200 and sizes["eval"] > 0


def _grade(kind, answer, reference, **options):
    v = verifiers.get_verifier(kind)
    return v.grade(answer, reference, verifiers.resolve_options(v, options)).verdict.value


@pytest.mark.parametrize("answer,reference,verdict", [
    (r"\frac{1}{2}", "0.5", "PASS"),
    ("0.5", r"\frac{1}{2}", "PASS"),
    ("1,000", "1000", "PASS"),
    ("Answer: $1,000$", "1000", "PASS"),
    ("x=3", "3", "PASS"),
    ("50%", "0.5", "PASS"),
    ("40", "40%", "PASS"),
    ("123", "12", "FAIL"),
    ("the answer is 21, not 12", "12", "FAIL"),
    ("First 12 apples, then 9 more: 21", "12", "FAIL"),
    (r"So the result is \boxed{\frac{3}{4}}.", "0.75", "PASS"),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", "PASS"),
    (r"\sqrt{2}", "2^{1/2}", "PASS"),
    (r"2\pi", "6.283185307179586", "PASS"),
    ("The answer is 12.", "12", "PASS"),
    ("0.333", "1/3", "FAIL"),
    ("2x+1", "1+2x", "PASS"),
    ("@@@ ???", "12", "MALFORMED"),
    ("__import__('os').system('true')", "1", "MALFORMED"),
])
def test_math_verifier_hard_cases(answer, reference, verdict):
    assert _grade("math", answer, reference) == verdict


@pytest.mark.parametrize("hostile", ["9**9**9", "Answer: 9^{9^{9}}", "((10**40)**64)**64", "1e999999",
                                     "2^(10^10)", "(" * 150 + "1" + ")" * 150, "9" * 5000])
def test_math_verifier_refuses_hostile_answers_quickly(hostile):
    # A bound on hanging, not a speed target: evaluated, these take minutes or
    # never end; refused, milliseconds. 15 s leaves room for a loaded machine
    # (1 s failed once while the suite shared two cores with other jobs).
    start = time.monotonic()
    assert _grade("math", hostile, "12") != "PASS"
    assert time.monotonic() - start < 15.0


@pytest.mark.parametrize("answer,verdict", [
    ("The answer is (B).", "PASS"), ("B) foo", "PASS"), ("**B**", "PASS"), ("b", "PASS"),
    (r"\boxed{B}", "PASS"), ("A dog is (B)", "PASS"), ("I pick (C)", "FAIL"),
    ("A or B", "MALFORMED"), ("The answer is A. The answer is B.", "MALFORMED"), ("no letter", "MALFORMED"),
])
def test_choice_verifier(answer, verdict):
    assert _grade("choice", answer, "B") == verdict


def test_exact_numeric_and_regex_verifiers():
    assert _grade("exact", "  Hello   World ", "hello world") == "PASS"
    assert _grade("exact", "Hello World", "hello world", ignore_case=False) == "FAIL"
    assert _grade("numeric", "3.1416", "3.14159", rel_tol=1e-4) == "PASS"
    assert _grade("numeric", "Answer: 3.2", "3.14159", rel_tol=1e-4) == "FAIL"
    assert _grade("numeric", "about 1,250.5 units", "1250.4", abs_tol=0.2) == "PASS"
    assert _grade("numeric", "none", "1") == "MALFORMED"
    assert _grade("regex", "abc123", r"[a-z]+\d+") == "PASS"
    assert _grade("regex", "The answer is: abc123", r"[a-z]+\d+") == "PASS"
    assert _grade("regex", "abc", r"\d+") == "FAIL"
    assert _grade("regex", "ABC", "abc", ignore_case=True) == "PASS"


def test_verifier_registry_accepts_new_kinds():
    kind = verifiers.VerifierKind("t-even", lambda a, r, o: verifiers.passed() if int(a) % 2 == 0 else verifiers.failed("odd"))
    verifiers.register_verifier(kind)
    assert "t-even" in verifiers.verifier_kinds() and _grade("t-even", "4", "") == "PASS"
    with pytest.raises(ValueError, match="already registered"):
        verifiers.register_verifier(kind)
