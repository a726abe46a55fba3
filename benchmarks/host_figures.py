"""The trainer's host figures over a run, from its logged train rows
(benchmarks/soak.py): resident memory per block of steps and its trend, and
the compiled programs kept and dropped (the run's rlpt.device.ProgramPool)."""

import numpy as np


def trainer_figures(train: list[dict], settle: int = 50) -> dict:
  """From the logged train rows: resident memory (``host/rss_mib``), median
  per ``settle`` steps and its least-squares slope over the steps after the
  first ``settle`` (MiB a step); the compiled programs kept (at most, at the
  end), dropped and compiled."""
  logged = [r for r in train if "host/rss_mib" in r]
  steps = np.array([r["step"] for r in logged], float)
  rss = np.array([r["host/rss_mib"] for r in logged], float)
  out: dict = {}
  if len(steps):
    out["rss_median_per_block"] = [
        float(np.median(rss[(steps > k) & (steps <= k + settle)]))
        for k in range(0, int(steps.max()), settle) if ((steps > k) & (steps <= k + settle)).any()]
    late = steps > settle
    if late.sum() > 2:
      out["rss_trend_mib_per_step"] = float(np.polyfit(steps[late], rss[late], 1)[0])
  last = train[-1] if train else {}
  for key in ("host/programs", "host/program_evictions", "host/compiles", "host/compile_s"):
    if key in last:
      out[key.split("/")[1] + "_last"] = last[key]
  if train and "host/programs" in last:
    out["programs_max"] = max(r.get("host/programs", 0.0) for r in train)
  return out
