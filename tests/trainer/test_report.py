"""The end-of-run report (rlpt.metrics.report via RunLog.report) on a synthetic
history over many domains: rows sorted by gain, figures equal to a direct
computation over the logged rows, the CSV, the heatmap and the family curves."""

import csv
import json
import math

import numpy as np
import pytest

from rlpt.metrics import RunLog

DOMAINS = tuple(f"rlpt/{f}-d{i}-easy-v0" for i, f in enumerate(["aa", "bb", "cc"] * 7))


def _history(rng):
  evals, train = [], []
  for k, step in enumerate((0, 10, 20, 30)):
    subset = DOMAINS if step in (0, 30) else DOMAINS[(k - 1) * 5:k * 5]
    row = {"step": step, "eval/domains": float(len(subset)), "eval/tasks": 3.0 * len(subset)}
    for key in ("success", "sampled_success"):
      vals = {d: float(rng.random()) for d in subset}
      row.update({f"{key}/{d}": v for d, v in vals.items()})
      row[f"{key}/mean"] = float(np.mean(list(vals.values())))
      for f in ("aa", "bb", "cc"):
        xs = [v for d, v in vals.items() if f"/{f}-" in d]
        row[f"family_{key}/{f}"] = float(np.mean(xs)) if xs else float("nan")
    evals.append(row)
  for step in range(1, 31):
    shares = rng.dirichlet(np.ones(len(DOMAINS)))
    row = {"step": step}
    for d, s in zip(DOMAINS, shares):
      row[f"share/{d}"] = float(s)
      if s > 0.04:
        row[f"groups/{d}"] = float(rng.integers(1, 4))
        row[f"informative/{d}"] = float(rng.random())
        row[f"sampled_tokens/{d}"] = float(rng.integers(10, 100))
        row[f"env_seconds/{d}"] = float(rng.random())
    train.append(row)
  return {"train": train, "eval": evals}


def test_report_over_many_domains(tmp_path):
  rng = np.random.default_rng(0)
  log = RunLog(str(tmp_path), DOMAINS, primary=True)
  history = _history(rng)
  log.load_history(history)
  out = log.report(30)
  log.close()
  base, final = history["eval"][0], history["eval"][-1]
  gains = {d: final[f"sampled_success/{d}"] - base[f"sampled_success/{d}"] for d in DOMAINS}
  assert [r["domain"] for r in out["domains"]] == sorted(DOMAINS, key=lambda d: -gains[d])
  for r in out["domains"]:
    d = r["domain"]
    assert r["sampled_success_gain"] == pytest.approx(gains[d])
    assert r["family"] == d.split("/")[1].split("-")[0]
    rows = [t for t in history["train"] if f"groups/{d}" in t]
    groups = sum(t[f"groups/{d}"] for t in rows)
    assert r["groups"] == groups
    assert r["informative_share"] == pytest.approx(
        sum(t[f"groups/{d}"] * t[f"informative/{d}"] for t in rows) / groups)
    assert r["sampled_tokens"] == sum(t[f"sampled_tokens/{d}"] for t in rows)
    assert r["train_share"] == pytest.approx(np.mean([t[f"share/{d}"] for t in history["train"]]))
    # 3 tasks per domain per evaluation: two full passes, one rotating subset.
    evaluated = sum(f"sampled_success/{d}" in e for e in history["eval"])
    assert r["eval_tasks"] == 3 * evaluated and evaluated in (2, 3)
  with open(tmp_path / "domains.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["domain"] for r in rows] == [r["domain"] for r in out["domains"]]
  assert math.isclose(float(rows[0]["sampled_success_gain"]),
                      out["domains"][0]["sampled_success_gain"], rel_tol=1e-5)
  table = (tmp_path / "summary.md").read_text().splitlines()
  names = [line.split("|")[1].strip() for line in table[4:]]
  assert names == [d.removeprefix("rlpt/") for d in sorted(DOMAINS, key=lambda d: -gains[d])] + [
      "mean"]
  for png in ("eval_success.png", "domain_shares.png"):
    assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_share_grid_prefers_the_curriculums_probabilities():
  from rlpt.metrics.report import TrainSummary, share_grid
  rng = np.random.default_rng(1)
  train = _history(rng)["train"]
  order, prefix, grid, steps = share_grid(TrainSummary.of_rows(DOMAINS, train))
  assert prefix == "share/" and order == sorted(DOMAINS, key=lambda d: (d.split("/")[1][:2], d))
  assert grid.shape == (len(DOMAINS), len(train))
  assert steps == [[r["step"], r["step"]] for r in train]
  assert grid[0, 3] == train[3][f"share/{order[0]}"]
  for row in train:  # a curriculum that logs its probabilities
    for d, w in zip(DOMAINS, rng.dirichlet(np.ones(len(DOMAINS)))):
      row[f"weight/{d}"] = float(w)
  order, prefix, grid, _ = share_grid(TrainSummary.of_rows(DOMAINS, train))
  assert prefix == "weight/"
  assert np.allclose(grid.sum(axis=0), 1.0)
  assert grid[5, 7] == train[7][f"weight/{order[5]}"]


def test_a_long_run_keeps_a_bounded_summary_of_its_steps():
  """Past ``columns`` steps the heatmap's adjacent columns merge into their mean
  (a column spans 2, 4, ... steps) and the table's sums stay exact; the state
  (checkpointed as JSON) does not grow with the steps."""
  from rlpt.metrics.report import TrainSummary, share_grid
  rng = np.random.default_rng(2)
  rows = [r for k in range(4) for r in _history(rng)["train"]]  # 120 steps
  for i, r in enumerate(rows):
    r["step"] = i + 1
  short = TrainSummary.of_rows(DOMAINS, rows[:8], columns=8)
  long = TrainSummary.of_rows(DOMAINS, rows, columns=8)
  assert long.width == 16 and len(long.steps) == 8
  assert long.steps[0] == [1, 16] and long.steps[-1] == [113, 120]
  _, _, grid, _ = share_grid(long)
  order = share_grid(short)[0]
  for c, (first, last) in enumerate(long.steps):
    span = rows[first - 1:last]
    np.testing.assert_allclose(grid[:, c], [np.mean([r[f"share/{d}"] for r in span]) for d in order],
                               rtol=1e-12)
  exact = TrainSummary.of_rows(DOMAINS, rows)  # 512 columns: one per step
  for i, d in enumerate(DOMAINS):
    a, b = long.domain_figures(i), exact.domain_figures(i)
    assert a == pytest.approx(b, rel=1e-12, nan_ok=True)
    groups = [r[f"groups/{d}"] for r in rows if f"groups/{d}" in r]
    assert a["groups"] == sum(groups)
  size = len(json.dumps(long.state_dict()))
  more = TrainSummary.of_rows(DOMAINS, rows + rows, columns=8)
  assert len(json.dumps(more.state_dict())) <= 1.05 * size
  restored = TrainSummary(DOMAINS, columns=8)
  restored.load_state_dict(json.loads(json.dumps(long.state_dict())))
  restored.add(rows[0] | {"step": 121})
  long.add(rows[0] | {"step": 121})
  assert json.dumps(restored.state_dict()) == json.dumps(long.state_dict())
  with pytest.raises(ValueError, match="even number"):
    TrainSummary(DOMAINS, columns=5)
