"""The domains on real material: grading latency, throughput and public-set figures.

    python benchmarks/domains_real.py --parts=finance [--finqa=PATH] [--tatqa=PATH] [--convfinqa=PATH] [--tasks=N]

Nothing is downloaded: each flag names a local copy of a published set
(FinQA's dataset/ folder or one of its JSON files, TAT-QA's dataset_raw/ files,
ConvFinQA's data.zip), loaded as published by `environments.families.finance`.

Finance rows (`finance_rows`), one per domain:

* each generated report domain (`rlpt/finance-report-*`, and the one-table
  statement rung `rlpt/finance-statement-*`): `--tasks` resets
  (PDF made and read back; `reset` p50/p99 is that cost, on a cold cache),
  the reference and a wrong answer graded for each (`ref_pass`; the wrong
  answers' FAIL share, MALFORMED and PASS counts);
* each public set given: rows loaded and refused (by reason), the published
  answer as the file writes it graded (`ref_pass`), another row's published
  answer graded where the two differ (a text given for a number is MALFORMED;
  `wrong_pass` counts the wrong answers graded PASS).

Both also grade, per task, two answers listing every number of the prompt
(as text and as a JSON list; `dump_pass` counts those graded PASS).

Grading latency (p50 / p99 over the references and wrong answers graded,
each REPEATS times) and throughput (answers
per second) are of one thread in this process.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gymnasium  # noqa: E402

import environments  # noqa: E402,F401  (registers every domain)
from environments import registry  # noqa: E402
from environments.families import finance  # noqa: E402
from environments.finance import answers, numbers  # noqa: E402


def _ms(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return 1e3 * xs[min(len(xs) - 1, int(q * len(xs)))]


REPEATS = 10  # each answer is graded this many times: one preempted call on a shared machine is not the p99


def _timed_grades(pairs: list[tuple[Any, str]]) -> tuple[list[str], list[float]]:
    """(verdict of each (reference, answer), seconds of each of its REPEATS gradings)."""
    verdicts, seconds = [], []
    for ref, answer in pairs:
        for i in range(REPEATS):
            t = time.perf_counter()
            verdict = answers.grade(ref, answer.strip()).verdict.value
            seconds.append(time.perf_counter() - t)
        verdicts.append(verdict)
    return verdicts, seconds


def _wrong(ref: answers.Reference) -> str:
    if ref.kind == "fields":
        return "{" + ", ".join(f'"{name}": "0"' for name, _ in ref.value) + "}"
    if ref.kind in ("span", "spans", "yesno"):
        return "Nothing"
    return answers.show_number(ref.value / numbers.SCALES[ref.unit] * 1.5 + 1)


_NUMBER_RE = re.compile(r"\(?-?\$?\d[\d,]*(?:\.\d+)?%?\)?")


def _dumps(tasks: list[Any]) -> list[tuple[Any, str]]:
    """Answers that list every number of the prompt, as text and as a JSON list: none may PASS."""
    out = []
    for task in tasks:
        found = _NUMBER_RE.findall(task.prompt)
        out += [(task.hidden, " ".join(found)), (task.hidden, json.dumps(found))]
    return out


def _row(domain: str, source: str, verdicts: list[str], wrongs: list[str], seconds: list[float],
         dumps: list[str], **extra: Any) -> dict[str, Any]:
    return {"domain": domain, "source": source, "graded": len(verdicts), "dump_pass": dumps.count("PASS"),
            "ref_pass": verdicts.count("PASS") / max(len(verdicts), 1),
            "wrong_fail": wrongs.count("FAIL") / max(len(wrongs), 1) if wrongs else float("nan"),
            "wrong_malformed": wrongs.count("MALFORMED"), "wrong_pass": wrongs.count("PASS"), "wrongs": len(wrongs),
            "grade_p50_ms": _ms(seconds, 0.5), "grade_p99_ms": _ms(seconds, 0.99),
            "grades_per_s": len(seconds) / max(sum(seconds), 1e-12), **extra}  # REPEATS per answer


def generated_rows(tasks: int, match: str = "") -> list[dict[str, Any]]:
    out = []
    for spec in registry.list_domains(family="finance", tag="pdf"):
        if match not in spec.id:
            continue
        env, resets, refs, tasks_seen = gymnasium.make(spec.id), [], [], []
        for seed in range(tasks):
            finance._text.cache_clear()
            t = time.perf_counter()
            _, info = env.reset(seed=seed)
            resets.append(time.perf_counter() - t)
            refs.append((env.unwrapped.task.hidden, info["demonstration"]))
            tasks_seen.append(env.unwrapped.task)
        verdicts, seconds = _timed_grades(refs)
        wrongs, more = _timed_grades([(ref, _wrong(ref)) for ref, _ in refs])
        dumps, _ = _timed_grades(_dumps(tasks_seen))
        out.append(_row(spec.id, "generated", verdicts, wrongs, seconds + more, dumps,
                        reset_p50_ms=_ms(resets, 0.5), reset_p99_ms=_ms(resets, 0.99)))
    return out


def _reasons(refused: tuple) -> dict[str, int]:
    """Refusals counted by reason, numbers in the reason replaced by N."""
    return dict(collections.Counter(re.sub(r"-?\d[\d.,]*", "N", r.reason) for r in refused).most_common())


def public_row(source: str, path: str) -> dict[str, Any]:
    domain_id = f"rlpt/finance-{source}-bench-v0"
    t = time.perf_counter()
    finance.register_source(domain_id, source, path)
    load_s = time.perf_counter() - t
    try:
        domain = registry.domain(domain_id)
        rows = domain.rows
        verdicts, seconds = _timed_grades([(r.task.hidden, r.published) for r in rows])
        pairs = [(a.task.hidden, b.published) for a, b in zip(rows, rows[1:] + rows[:1])
                 if numbers.normalise_text(a.published) != numbers.normalise_text(b.published)]
        wrongs, more = _timed_grades(pairs)
        dumps, _ = _timed_grades(_dumps([r.task for r in rows]))
        failed = [r.task.key for r, v in zip(rows, verdicts) if v != "PASS"]
        return _row(domain_id, f"{source}: {path}", verdicts, wrongs, seconds + more, dumps, load_s=load_s,
                    refused=len(domain.refused), refused_by_reason=_reasons(domain.refused),
                    not_passed=failed[:10])
    finally:
        registry.unregister(domain_id)


def finance_rows(finqa: str | None = None, tatqa: str | None = None, convfinqa: str | None = None,
                 tasks: int = 20, match: str = "") -> list[dict[str, Any]]:
    """One dict per finance domain (see the module doc; generated ones whose id
    contains `match`); public sets only where a path is given."""
    rows = generated_rows(tasks, match)
    for source, path in (("finqa", finqa), ("tatqa", tatqa), ("convfinqa", convfinqa)):
        if path:
            rows.append(public_row(source, path))
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print("| domain | graded | ref PASS | wrong: FAIL / MALFORMED / PASS | number dumps PASS | grade p50 / p99 ms "
          "| grades/s | reset p50 / p99 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        reset = f"{r['reset_p50_ms']:.0f} / {r['reset_p99_ms']:.0f}" if "reset_p50_ms" in r else "-"
        wrong = f"{100 * r['wrong_fail']:.2f}% / {r['wrong_malformed']} / {r['wrong_pass']} of {r['wrongs']}"
        print(f"| {r['domain']} | {r['graded']} | {100 * r['ref_pass']:.2f}% | {wrong} | {r['dump_pass']} | "
              f"{r['grade_p50_ms']:.3f} / {r['grade_p99_ms']:.3f} | {r['grades_per_s']:.0f} | {reset} |")
    for r in rows:
        if "refused" in r:
            print(f"\n{r['source']}: loaded in {r['load_s']:.1f} s, {r['graded']} rows graded, {r['refused']} "
                  f"refused {r['refused_by_reason']}; not passed: {r['not_passed']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finqa", help="FinQA's dataset/ folder or one of its JSON files")
    parser.add_argument("--tatqa", help="a TAT-QA dataset_raw JSON file (or the folder)")
    parser.add_argument("--convfinqa", help="ConvFinQA's data.zip, its unzipped folder or one of its JSON files")
    parser.add_argument("--tasks", type=int, default=20, help="resets per generated report domain")
    parser.add_argument("--domains", default="", help="only generated domains whose id contains this")
    args = parser.parse_args(argv)
    print_rows(finance_rows(args.finqa, args.tatqa, args.convfinqa, args.tasks, args.domains))


if __name__ == "__main__":
    main()
