"""The verifiers on public material nobody here wrote.

    python benchmarks/verifiers.py --math_verify=PATH --gsm8k=PATH --mbpp=PATH [--threads=1,8]

Nothing is downloaded: each flag names a local copy a user fetched.

* --math_verify: a checkout of huggingface/Math-Verify (or its tests/ folder).
  The gold/prediction pairs its suite checks with default options are graded
  by the `math` verifier; printed: agreement with their expected verdicts and
  the number of wrong answers graded PASS.
* --gsm8k: GSM8K's test.jsonl as published (openai/grade-school-math). It is
  registered unmodified (the reference is what follows "####"), and each
  reference is graded written in several answer styles, and as N+1; printed:
  the PASS rate per style.
* --mbpp: MBPP's mbpp.jsonl as published (google-research/google-research,
  974 rows). Printed: rows loaded and refused, the canonical solutions' PASS
  rate, `return None` and cheat PASS counts, answers/s, and whether any
  verdict differs between grading thread counts (--threads).

A section whose flag is not given is skipped.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _math_verify_pairs(path: str) -> list[tuple[str, str, str, bool]]:
    """(where, gold, pred, expected) for every row of every `pytest.mark.parametrize`
    table in Math-Verify's tests/test_*.py whose row is a literal with gold and
    pred, read with `ast` (nothing there is imported or run). At
    5d148cfaaf99214c2e4ffb4bc497ab042c592a7a that is 268 pairs: test_all.py's
    190 (its one non-literal row, an f-string in test_float_precision, is
    left out), test_boxed.py's 3, test_numina_cases.py's 30,
    test_open_thoughts.py's 29, test_strict.py's 2 and test_yujianll.py's 14
    (test_string_extraction.py has no gold). The issue's 268; 7 of them check
    options other than the defaults (precision=2 twice, precision=5 twice,
    allow_set_relation_comp=True twice, strict=False once) and 114 restrict
    extraction to LaTeX or to plain expressions: each is graded as it is."""
    import ast
    import pathlib

    root = pathlib.Path(path)
    root = root / "tests" if (root / "tests").is_dir() else root
    pairs = []
    for file in sorted(root.glob("test_*.py")):
        for fn in ast.parse(file.read_text()).body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            for dec in fn.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                for row in dec.args[1].elts:
                    try:
                        values = dict(zip(names, ast.literal_eval(row)))
                    except ValueError:
                        continue
                    if "gold" in values and "pred" in values:
                        expected = values.get("expected", values.get("result"))
                        pairs.append((f"{file.name}:{row.lineno} {fn.name}", values["gold"], values["pred"], bool(expected)))
    return pairs


# Pairs whose expected verdict is wrong for the default options (the `math`
# verifier has no others): listed by the benchmark, counted as disagreements.
_MISLABELLED = {
    (r"$1 - \frac{1}{\mathrm{e}}$", r"$1 + \frac{1}{\mathrm{e}}$"):
        "1 - 1/e is not 1 + 1/e (Math-Verify drops \\mathrm{e} as a unit and reads both as 1)",
    (r"$(\begin{pmatrix}\frac{1}{3}\\ \frac{1}{5} \end{pmatrix})$", r"$\begin{pmatrix}0.33\\0.2 \end{pmatrix}$"):
        "0.33 equals 1/3 only at precision=2; at the default 6 decimals it does not",
    (r"$(\frac{3}{5},\frac{8}{3}]$", "$(0.6,2.6667]$"):
        "2.6667 equals 8/3 only at precision=2; at the default 6 decimals it does not",
    ("$x \\in [-2,7]$", "$-2 \\\\le x \\\\le 7$"):
        "labelled 1 with allow_set_relation_comp=True and 0 without: the default is 0",
    ("$f(x)$", "$f(y)$"): "labelled 1 with strict=False and 0 with strict=True: the default is 0",
    ("$9$", "Answer $ \n 9 \n $"): "9 is the answer; 0 is LaTeX-only extraction refusing a formula across lines",
    ("$9$", "Answer \\( \n 9 \n \\)"): "9 is the answer; 0 is LaTeX-only extraction refusing a formula across lines",
}


def math_verify_section(path: str, args: argparse.Namespace) -> None:
    """Agreement of the `math` verifier with Math-Verify's expected verdicts."""
    from environments.datasets import verifiers

    kind = verifiers.get_verifier("math")
    options = verifiers.resolve_options(kind, {})
    pairs = _math_verify_pairs(path)
    agree, wrong_pass, disagreeing = 0, 0, []
    for where, gold, pred, expected in pairs:
        problem = kind.check_reference(gold, options)
        verdict = "REFUSED" if problem else kind.grade(pred, gold, options).verdict.value
        wrong_pass += verdict == "PASS" and not expected
        mislabelled = _MISLABELLED.get((gold, pred))
        if (verdict == "PASS") == expected and not problem and not (mislabelled and expected):
            agree += 1
        else:
            disagreeing.append((where, gold, pred, expected, verdict, mislabelled or problem or ""))
    wrong_pass_labelled = sum(1 for _, gold, pred, expected, verdict, _ in disagreeing
                              if verdict == "PASS" and not expected and (gold, pred) not in _MISLABELLED)
    print(f"   pairs: {len(pairs)}; agree: {agree}/{len(pairs)} ({100 * agree / len(pairs):.1f}%); "
          f"wrong PASS (expected 0, graded PASS): {wrong_pass}, of which {wrong_pass - wrong_pass_labelled} "
          f"on pairs judged mislabelled below")
    for where, gold, pred, expected, verdict, note in disagreeing:
        print(f"   - {where}: gold {gold!r:.70} pred {pred!r:.70} expected {int(expected)} got {verdict}"
              + (f"\n       {'mislabelled' if note in _MISLABELLED.values() else 'note'}: {note}" if note else ""))


# Programs that try to pass MBPP's tests without solving the task; `{entry}` is the
# task's function name. None may earn a PASS.
_MBPP_CHEATS = {
    "lying __eq__": ("class _E:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
                     "    def __bool__(self): return True\n    __hash__ = object.__hash__\n"
                     "def {entry}(*args, **kwargs):\n    return _E()"),
    "int subclass with lying __eq__": ("class _I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
                                       "def {entry}(*args, **kwargs):\n    return _I(0)"),
    "str subclass with lying __eq__": ("class _S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\n"
                                       "def {entry}(*args, **kwargs):\n    return _S('')"),
    "class named Counter": ("class Counter(dict):\n    def __eq__(self, o): return True\n    __hash__ = None\n"
                            "def {entry}(*args, **kwargs):\n    return Counter()"),
    "exit(0) before the tests": "import sys\nsys.exit(0)\ndef {entry}(*args, **kwargs):\n    return None",
    "print PASS and os._exit(0)": ("import os\ndef {entry}(*args, **kwargs):\n    print('PASS')\n    print('all tests passed')\n"
                                   "    os._exit(0)"),
    "patched builtins": ("import builtins\nclass _E:\n    def __eq__(self, o): return True\n    def __bool__(self): return True\n"
                         "builtins.AssertionError = type('A', (Exception,), {{}})\n"
                         "for _n in ('int', 'sorted', 'len', 'isinstance'):\n    setattr(builtins, _n, lambda *a, **k: _E())\n"
                         "def {entry}(*args, **kwargs):\n    return _E()"),
    "reads the tests from its process": (
        "import gc, sys\ndef {entry}(*args, **kwargs):\n"
        "    for o in gc.get_objects():\n"
        "        if type(o) is dict and 'expected' in o: return o['expected']\n"
        "        if type(o) is list and o and all(type(i) is str and i.startswith('assert') for i in o): return o\n"
        "    fr = sys._getframe(1)\n"
        "    while fr is not None:\n"
        "        for v in list(fr.f_locals.values()):\n"
        "            if type(v) is str and ' == ' in v: return v\n"
        "        fr = fr.f_back\n"
        "    return None"),
}


def _mbpp_signature(code: str, entry: str) -> str:
    """The argument list of `entry` in a program, or "*args, **kwargs"."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return "*args, **kwargs"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            return ast.unparse(node.args)
    return "*args, **kwargs"


def _grade_all(domain, jobs, threads: int):
    """Verdicts of (task, answer) jobs graded by `threads` threads, and the seconds taken."""
    import concurrent.futures
    import time

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        grades = list(pool.map(lambda job: domain.grade(*job), jobs))
    return grades, time.perf_counter() - start


def mbpp_section(path: str, args: argparse.Namespace) -> None:
    """MBPP as published, registered unmodified with the `code` verifier: what loads,
    and how its canonical solutions, `return None` answers and cheats are graded."""
    import json
    import uuid

    from environments import datasets, registry

    with open(path, encoding="utf-8") as f:
        rows = {str(row["task_id"]): row for row in map(json.loads, filter(str.strip, f))}
    spec = datasets.register_file(f"rlpt/dataset-mbpp{uuid.uuid4().hex[:8]}-v0", path, verifier="code",
                                  fields={"prompt": "text", "answer": "test_list", "id": "task_id"})
    domain = registry.domain(spec.id)
    tasks = list(domain._tasks)
    print(f"   rows: {len(rows)}; loaded: {len(tasks)}; refused: {len(domain.refused)}")
    for refused in domain.refused:
        print(f"   - refused task {refused.id} ({refused.where}): {refused.reason}")
    counts = [int(n) for n in str(args.threads).split(",") if n.strip()]
    canonical = [(task, rows[task.key]["code"]) for task in tasks]
    runs = {}
    for threads in counts:
        grades, seconds = _grade_all(domain, canonical, threads)
        runs[threads] = grades
        passed = sum(g.success for g in grades)
        print(f"   canonical solutions, {threads} grading thread(s): PASS {passed}/{len(grades)} "
              f"({100 * passed / len(grades):.2f}%) in {seconds:.1f} s ({len(grades) / seconds:.1f} answers/s)")
    first = counts[0]
    for (task, _), grade in zip(canonical, runs[first]):
        if not grade.success:
            print(f"   - canonical task {task.key}: {grade.verdict.value}: {grade.feedback[:300]}")
    for threads in counts[1:]:
        differ = [(task.key, a.verdict.value, b.verdict.value)
                  for (task, _), a, b in zip(canonical, runs[first], runs[threads]) if a.verdict != b.verdict]
        print(f"   verdicts that differ between {first} and {threads} threads: {len(differ)}"
              + "".join(f"\n   - task {key}: {a} with {first}, {b} with {threads}" for key, a, b in differ))
    most = max(counts)
    nones = [(task, f"def {task.hidden.entry}({_mbpp_signature(rows[task.key]['code'], task.hidden.entry)}):\n"
                    "    return None") for task in tasks]
    grades, seconds = _grade_all(domain, nones, most)
    passed = [task.key for (task, _), g in zip(nones, grades) if g.success]
    print(f"   `return None` answers: PASS {len(passed)}/{len(nones)} ({len(nones) / seconds:.1f} answers/s, "
          f"{most} threads)" + (f": tasks {', '.join(passed)}" if passed else ""))
    total = 0
    for name, template in _MBPP_CHEATS.items():
        cheats = [(task, template.format(entry=task.hidden.entry)) for task in tasks]
        grades, seconds = _grade_all(domain, cheats, most)
        passed = [task.key for (task, _), g in zip(cheats, grades) if g.success]
        infra = sum(g.infra_error for g in grades)
        total += len(passed)
        print(f"   cheat {name!r}: PASS {len(passed)}/{len(cheats)}, infrastructure errors {infra} "
              f"({len(cheats) / seconds:.1f} answers/s)" + (f": tasks {', '.join(passed)}" if passed else ""))
    print(f"   cheats: PASS {total} in all ({len(_MBPP_CHEATS)} programs x {len(tasks)} tasks)")

def _gsm8k_styles(n: str, question: str) -> dict[str, str]:
    """The reference `n` written in each answer style (see `gsm8k_section`)."""
    import re

    value = float(n.replace(",", ""))
    grouped = f"{int(value):,}" if value == int(value) else n
    unit = re.search(r"\bhow many ([A-Za-z]+)\b", question, re.IGNORECASE)
    unit = unit.group(1).lower() if unit else "dollars" if "$" in question else "units"
    return {
        "plain": n,
        "boxed": f"\\boxed{{{n}}}",
        "boxed $": f"\\boxed{{\\${n}}}",
        "boxed \\text{dollars}": f"\\boxed{{{n} \\text{{ dollars}}}}",
        "unit word": f"The answer is {n} {unit}.",
        "the answer is": f"The answer is {n}.",
        "minerva": f"Final Answer: The final answer is ${n}$. I hope it is correct.",
        "####": f"#### {n}",
        "thousands": f"The answer is {grouped}.",
    }


def _chain_of_thought(n: str) -> str:
    """Reasoning before the final answer: other numbers and an intermediate \\boxed{}."""
    value = float(n.replace(",", ""))
    a, b = int(abs(value)) + 7, 3
    return (f"First, {a} - {b} = {a - b}, so the first part is \\boxed{{{a - b}}}.\n"
            f"Then 12 * 2 = 24 and 24 / 6 = 4; adding the 3 left over gives {a - b + 7}.\n")


def gsm8k_section(path: str, args: argparse.Namespace) -> None:
    """GSM8K's test file registered unmodified (reference="after:####"); each row's
    reference N graded in every style of `_gsm8k_styles`, alone and after
    `_chain_of_thought`, and N+1 in the same styles. Printed: rows loaded and
    refused, PASS rate per style, and grading throughput."""
    import collections
    import json
    import time

    from environments import registry
    from environments.datasets import register_file

    domain_id = "rlpt/dataset-gsm8k-bench-v0"
    spec = register_file(domain_id, path, verifier="math", fields={"prompt": "question", "answer": "answer"},
                         reference="after:####")
    domain = registry.domain(spec.id)
    refused = getattr(domain, "refused", ())
    questions = {json.loads(line)["question"] for line in open(path, encoding="utf-8") if line.strip()}
    tasks = domain._tasks
    print(f"   rows: {len(questions)} in the file, {len(tasks)} loaded, {len(refused)} refused")
    passes = collections.Counter()
    verdicts = collections.Counter()
    count = 0
    start = time.perf_counter()
    for task in tasks:
        n = str(task.hidden)
        value = float(n.replace(",", ""))
        wrong = str(int(value) + 1) if value == int(value) else str(value + 1)
        question = task.prompt
        for label, number in (("N", n), ("N+1", wrong)):
            for style, text in _gsm8k_styles(number, question).items():
                for cot in ("", _chain_of_thought(n)):
                    grade = domain.grade(task, cot + text)
                    key = (label, style + (" after reasoning" if cot else ""))
                    passes[key] += grade.verdict.value == "PASS"
                    verdicts[(key, grade.verdict.value)] += 1
                    count += 1
    elapsed = time.perf_counter() - start
    keys = sorted({key for key, _ in verdicts}, key=lambda k: (k[0] != "N", k[1]))
    for key in keys:
        others = {v: c for (k, v), c in verdicts.items() if k == key and v != "PASS"}
        print(f"   {key[0]:>3} {key[1]:<36} PASS {passes[key]}/{len(tasks)} ({100 * passes[key] / len(tasks):.1f}%)"
              + (f"  others: {others}" if others else ""))
    print(f"   graded {count} answers in {elapsed:.1f} s: {count / elapsed:.0f} answers/s (one thread)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--math_verify", help="a checkout of huggingface/Math-Verify, or its tests/ folder")
    parser.add_argument("--gsm8k", help="GSM8K's test.jsonl")
    parser.add_argument("--mbpp", help="MBPP's mbpp.jsonl")
    parser.add_argument("--threads", default="1,8", help="comma-separated grading thread counts (MBPP)")
    args = parser.parse_args(argv)
    sections = [("Math-Verify pairs", args.math_verify, math_verify_section),
                ("GSM8K answer styles", args.gsm8k, gsm8k_section),
                ("MBPP", args.mbpp, mbpp_section)]
    for title, path, section in sections:
        print(f"== {title}")
        if not path:
            print("   skipped (no path given)")
            continue
        section(path, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
