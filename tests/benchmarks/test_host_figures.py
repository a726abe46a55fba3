"""benchmarks/host_figures.py (benchmarks/soak.py's report): the trainer's
figures from its logged rows (medians per block, the least-squares trend
after settling, the program counts) against direct computations."""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from host_figures import trainer_figures  # noqa: E402


def _rows(n, rss):
  return [{"step": s, "host/rss_mib": rss(s), "host/programs": float(min(s, 40)),
           "host/program_evictions": float(max(0, s - 40)), "host/compiles": 90.0,
           "host/compile_s": 12.5} for s in range(1, n + 1)]


def test_a_flat_run_has_no_trend_and_a_growing_one_its_slope():
  flat = trainer_figures(_rows(200, lambda s: 3000.0 + (50.0 if s % 2 else -50.0)))
  assert abs(flat["rss_trend_mib_per_step"]) < 0.05  # the +-50 swing alone
  assert flat["rss_median_per_block"] == [3000.0] * 4
  growing = trainer_figures(_rows(200, lambda s: 1000.0 + 0.75 * s + 30.0 * np.sin(s)))
  steps = np.arange(51, 201)
  want = np.polyfit(steps, 1000.0 + 0.75 * steps + 30.0 * np.sin(steps), 1)[0]
  assert abs(growing["rss_trend_mib_per_step"] - want) < 1e-9
  assert abs(want - 0.75) < 0.1


def test_program_counts_come_from_the_last_row_and_the_maximum():
  f = trainer_figures(_rows(120, lambda s: 1.0))
  assert f["programs_last"] == 40.0 and f["programs_max"] == 40.0
  assert f["program_evictions_last"] == 80.0 and f["compiles_last"] == 90.0
  assert trainer_figures([]) == {}
