"""benchmarks/hostile_replies.py: the replies fit the domains' bounds, and one
domain of every in-process family grades each of them quickly, never passing
and never masked as an infrastructure error."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import hostile_replies  # noqa: E402


def test_every_reply_fits_the_bound_it_was_made_for():
  for n in (64, 300, 2048):
    replies = hostile_replies.hostile_replies(n)
    assert len(replies) >= 15
    for name, text in replies.items():
      assert 0 < len(text) <= n and text.strip(), (n, name, len(text))


def test_one_domain_of_each_family_grades_every_hostile_reply():
  # A child process: a grader that spins in C holds the GIL, so only a
  # process boundary turns a regression into a failure instead of a hang.
  code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import hostile_replies as h; "
          "rows, failures = h.grade_all(h.domain_specs(per_family=1), 5.0); "
          "print(json.dumps({'rows': len(rows), 'families': sorted({r['family'] for r in rows}), "
          "'failures': failures}))")
  done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert {"dataset", "finance", "math", "rg", "strings"} <= set(out["families"])
  assert out["rows"] >= 15 * len(out["families"])
  assert out["failures"] == []
