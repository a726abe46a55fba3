"""Graders against replies built to be slow or to slip through: every in-process
domain grades each hostile reply, timed, and none may time out, come back as
an infrastructure error, or pass without a digit in it.

    python benchmarks/hostile_replies.py                       # every in-process single-turn domain
    python benchmarks/hostile_replies.py --per_family=1        # one domain of each family
    python benchmarks/hostile_replies.py --domains=rlpt/dataset-arith-easy-v0

A grader's time is bounded by a deadline thread (environments.env), but a
grader that spins in C (a regular expression, a parser) holds the GIL: the
deadline cannot fire and every other thread of the process stalls with it.
And a reply that does time out is masked as the verifier's failure, out of
the success denominator, so a policy that learns to write such replies hides
its failures. Both are the answer's doing; so each grader must bound its own
work by what it reads. The replies here are the shapes that break that: long
runs of letters, digits or spaces, deep brackets, boxes, fences and dollar
spans, exponent towers, repeated answer lines, each as long as the domain
lets an answer be (``max_instruct_answer_chars``, else ``max_answer_chars``).

Graded with no deadline, on the domain's own ``grade`` through `TaskEnv.step`
(the path the trainer takes), in this process: a hang shows as a hang. Prints
per family the domains, grades, slowest grade and its reply, and every
failure; exits 1 if any grade took longer than ``--max_s`` seconds, came back
as an infrastructure error, or passed with no digit in the reply. A reply
with digits may hold the task's own answer ("boxes in boxes" is
\\boxed{\\boxed{...1...}}, right where the answer is 1): its passes are counted
in the verdicts column, not failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import string
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def hostile_replies(n: int) -> dict[str, str]:
  """Replies of at most ``n`` characters, by shape."""
  k = max(1, n // 2)
  rng = random.Random(0)
  printable = string.ascii_letters + string.digits + string.punctuation + " \n"
  out = {
      "letter run after a value": "5 " + "a" * (n - 3) + "!",
      "digit run": "9" * n,
      "space run": "5" + " " * (n - 3) + "x!",
      "nested brackets": "(" * k + ")" * k,
      "nested braces": "{" * k + "}" * k,
      "boxes in boxes": ("\\boxed{" * (n // 9) + "1" + "}" * (n // 9))[:n],
      "dollar spans": ("$1$ " * n)[:n],
      "lone dollars": "$" * n,
      "fractions": ("\\frac{" * n)[:n],
      "exponent tower": ("9^" * k)[:n - 1] + "9",
      "thousands": ("1," * k)[:n],
      "words and dots": ("ab." * n)[:n - 1] + "!",
      "answer lines": ("Answer: 1\n" * n)[:n],
      "open fences": ("```\n" * n)[:n],
      "json nesting": ('{"a":' * n)[:n],
      "arabic-indic digits": "\u0663" * n,
      "random printable": "".join(rng.choice(printable) for _ in range(n)),
  }
  return {name: text for name, text in out.items() if text.strip()}


def domain_specs(domains: str = "", per_family: int = 0) -> list:
  """The specs of ``domains`` (ids, comma-separated), else of every in-process
  single-turn domain, at most ``per_family`` of each family (0: all)."""
  import environments  # noqa: F401  (registers every domain)
  from environments import registry
  if domains:
    return [registry.get(d) for d in domains.split(",")]
  specs = [s for s in registry.list_domains() if "sandbox" not in s.tags and s.max_turns is None]
  if per_family:
    by_family = collections.defaultdict(list)
    for s in specs:
      by_family[s.family].append(s)
    specs = [s for ss in by_family.values() for s in ss[:per_family]]
  return specs


def grade_all(specs, max_s: float, progress=None) -> tuple[list[dict], list[str]]:
  """One row per (domain, reply): seconds, verdict, infra_error; and the failures.
  ``progress(line)``, if given, gets each failure as it is found and each
  domain's end, so a grade that never returns still leaves what came before."""
  from environments import TaskEnv
  rows, failures = [], []

  def fail(line: str):
    failures.append(line)
    if progress is not None:
      progress(f"FAIL {line}")

  for spec in specs:
    style = "instruct" if spec.max_instruct_answer_chars else "bare"
    limit = spec.max_instruct_answer_chars or spec.max_answer_chars
    env = TaskEnv(spec.id, grade_timeout_s=None, prompt_style=style)
    try:
      for name, reply in hostile_replies(limit).items():
        env.reset(seed=0, options={"split": "eval"})
        start = time.perf_counter()
        _, _, _, _, info = env.step(reply)
        row = {"domain": spec.id, "family": spec.family, "reply": name, "chars": len(reply),
               "seconds": time.perf_counter() - start, "verdict": info["verdict"],
               "infra_error": bool(info["infra_error"])}
        rows.append(row)
        what = f"{spec.id} on {name!r} ({len(reply)} chars)"
        if row["seconds"] > max_s:
          fail(f"{what}: {row['seconds']:.2f} s (bound {max_s:g} s)")
        if info["success"] and not any(c.isdigit() for c in reply):
          fail(f"{what}: passed")  # a reply with no digit holds no task's value
        if row["infra_error"]:
          fail(f"{what}: an infrastructure error ({info['feedback'][:120]!r}), masked")
    finally:
      env.close()
    if progress is not None:
      progress(f"# {spec.id}: done")
  return rows, failures


def report(rows: list[dict]) -> str:
  lines = ["| family | domains | grades | slowest grade | its domain and reply | verdicts |",
           "|---|---:|---:|---:|---|---|"]
  by_family = collections.defaultdict(list)
  for r in rows:
    by_family[r["family"]].append(r)
  for family, rs in sorted(by_family.items()):
    worst = max(rs, key=lambda r: r["seconds"])
    verdicts = collections.Counter(r["verdict"] for r in rs)
    lines.append(f"| {family} | {len({r['domain'] for r in rs})} | {len(rs)} | {worst['seconds']:.3f} s | "
                 f"{worst['domain'].removeprefix('rlpt/')}: {worst['reply']} ({worst['chars']}) | "
                 + ", ".join(f"{v} {c}" for v, c in verdicts.most_common()) + " |")
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--domains", default="", help="domain ids, comma-separated (default: every "
                      "in-process single-turn domain)")
  parser.add_argument("--per_family", type=int, default=0, help="at most this many domains a family (0: all)")
  parser.add_argument("--max_s", type=float, default=2.0, help="the longest a grade may take, in seconds")
  args = parser.parse_args(argv)
  specs = domain_specs(args.domains, args.per_family)
  print(f"# {len(specs)} domains x {len(hostile_replies(1000))} reply shapes, {os.cpu_count()} cores", flush=True)
  start = time.perf_counter()
  rows, failures = grade_all(specs, args.max_s, progress=lambda line: print(line, flush=True))
  print(report(rows))
  print(f"\n{len(rows)} grades in {time.perf_counter() - start:.0f} s; {len(failures)} failures "
        "(each printed above as it was found)")
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
