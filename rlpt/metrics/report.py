"""End-of-run artefacts: held-out success curves (PNG), a base-vs-final table
sorted by gain (markdown and CSV, with each domain's training share, signal
and compute) and a heatmap of each domain's sampling share over steps.

Two success measures are reported when present: ``sampled_success`` (pass@1
of the policy as it is trained, sampling at the rollout temperature: what RL
optimises) and ``success`` (decoding with eval.temperature, greedy by default).
Runs over many domains plot per-family curves (``family_<measure>/<f>``)
instead of one line per domain.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence

import numpy as np

from rlpt.curriculum.signal import domain_family

MEASURES = (("sampled_success", "sampled pass@1"), ("success", "greedy"))
# ``<measure>_masked/<domain>``: held-out samples of the domain the environments
# could not grade (infrastructure errors), left out of its success (rlpt.evaluation).
MASKED = "_masked"
# Up to this many domains the curves show each domain; beyond, each family.
MAX_CURVES = 12


def _present(rows: Sequence[Mapping]) -> list[tuple[str, str]]:
  return [(key, label) for key, label in MEASURES if rows and f"{key}/mean" in rows[0]]


def _get(row: Mapping, key: str) -> float:
  return float(row.get(key, math.nan))  # also the "nan" strings of metrics.jsonl


def plot_eval_curves(rows: Sequence[Mapping], domains: Sequence[str], path: str) -> None:
  """One panel per success measure: each domain (or, past ``MAX_CURVES``
  domains, each family) and the mean against step. Evaluations that skipped
  a domain (``eval.domains_per_eval``) leave a gap in its line."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  measures = _present(rows)
  by_family = len(domains) > MAX_CURVES
  names = sorted({domain_family(d) for d in domains}) if by_family else list(domains)
  steps = [r["step"] for r in rows]
  fig, axes = plt.subplots(1, len(measures), figsize=(6.5 * len(measures), 4.5), dpi=110,
                           squeeze=False)
  for ax, (key, label) in zip(axes[0], measures):
    for n in names:
      series = f"family_{key}/{n}" if by_family else f"{key}/{n}"
      ys = np.array([_get(r, series) for r in rows])
      ok = ~np.isnan(ys)
      ax.plot(np.array(steps)[ok], ys[ok], marker="o", ms=3, lw=1.2, label=n.removeprefix("rlpt/"))
    ax.plot(steps, [_get(r, f"{key}/mean") for r in rows], color="black", lw=2.5, label="mean")
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    what = "family (mean over its evaluated domains)" if by_family else "domain"
    ax.set_title(f"Held-out success per {what} ({label})", fontsize=10)
  axes[0][-1].legend(fontsize=7, ncol=2, loc="best")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


# The share heatmap keeps at most this many columns: past it, adjacent
# columns merge into their mean (a column spans 2, 4, ... steps).
MAX_COLUMNS = 512
_SUMS = ("share", "groups", "informative", "sampled_tokens", "env_seconds")


class TrainSummary:
  """What the report needs of the training rows, in memory bounded by the
  number of domains whatever the run's length: per domain the sums behind the
  table's columns, and each domain's sampling share per step for the heatmap
  at most ``columns`` columns wide. Exact while the run has at most
  ``columns`` rows; checkpointed with the run (``state_dict``, JSON)."""

  def __init__(self, domains: Sequence[str], columns: int = MAX_COLUMNS):
    if columns < 2 or columns % 2:
      raise ValueError(f"TrainSummary columns must be an even number >= 2, got {columns}")
    self.domains, self.columns = tuple(domains), columns
    n = len(self.domains)
    self.rows = 0
    self.sums = {k: np.zeros(n) for k in _SUMS}
    self.width = 1                      # rows per heatmap column (the last may hold fewer)
    self.steps: list[list[int]] = []    # each column's [first, last] step
    self.in_last = 0                    # rows in the last column
    # Per prefix, [column, domain] sums and counts of the logged (non-NaN) values.
    self.cells = {p: (np.zeros((columns, n)), np.zeros((columns, n))) for p in ("weight/", "share/")}

  def _values(self, row: Mapping, prefix: str) -> np.ndarray:
    return np.array([_get(row, f"{prefix}{d}") for d in self.domains])

  def add(self, row: Mapping) -> None:
    """One training row (``step`` and the step's metrics)."""
    self.rows += 1
    share, groups = self._values(row, "share/"), self._values(row, "groups/")
    logged = ~np.isnan(groups)
    self.sums["share"] += share  # a domain missing from a row has no mean share
    self.sums["groups"] += np.where(logged, groups, 0.0)
    self.sums["informative"] += np.where(logged, groups * self._values(row, "informative/"), 0.0)
    for key in ("sampled_tokens", "env_seconds"):
      x = self._values(row, f"{key}/")
      self.sums[key] += np.where(np.isnan(x), 0.0, x)
    step = int(row["step"])
    if not self.steps or self.in_last == self.width:
      if len(self.steps) == self.columns:
        self._merge()
      self.steps.append([step, step])
      self.in_last = 0
    self.steps[-1][1] = step
    self.in_last += 1
    c = len(self.steps) - 1
    for p, (total, count) in self.cells.items():
      x = share if p == "share/" else self._values(row, p)
      total[c] += np.where(np.isnan(x), 0.0, x)
      count[c] += ~np.isnan(x)

  def _merge(self) -> None:
    """Every two adjacent (full) columns into one twice as wide."""
    half = self.columns // 2
    self.width *= 2
    self.steps = [[a[0], b[1]] for a, b in zip(self.steps[::2], self.steps[1::2])]
    self.in_last = self.width
    for total, count in self.cells.values():
      for x in (total, count):
        x[:half] = x[0::2] + x[1::2]
        x[half:] = 0.0

  def domain_figures(self, i: int) -> dict:
    """Domain ``i``'s training figures for the report's table."""
    groups = float(self.sums["groups"][i])
    return {"train_share": float(self.sums["share"][i] / self.rows),
            "groups": groups,
            "informative_share": float(self.sums["informative"][i] / groups) if groups else math.nan,
            "sampled_tokens": float(self.sums["sampled_tokens"][i]),
            "env_seconds": float(self.sums["env_seconds"][i])}

  def state_dict(self) -> dict:
    used = len(self.steps)
    return {"columns": self.columns, "rows": self.rows, "width": self.width,
            "steps": self.steps, "in_last": self.in_last,
            "sums": {k: v.tolist() for k, v in self.sums.items()},
            "cells": {p: [t[:used].tolist(), c[:used].tolist()] for p, (t, c) in self.cells.items()}}

  def load_state_dict(self, state: Mapping) -> None:
    self.__init__(self.domains, state["columns"])
    self.rows, self.width, self.in_last = state["rows"], state["width"], state["in_last"]
    self.steps = [list(x) for x in state["steps"]]
    self.sums = {k: np.asarray(v, np.float64) for k, v in state["sums"].items()}
    used = len(self.steps)
    for p, (t, c) in state["cells"].items() if used else ():
      total, count = self.cells[p]
      total[:used], count[:used] = np.reshape(t, (used, -1)), np.reshape(c, (used, -1))

  @classmethod
  def of_rows(cls, domains: Sequence[str], rows: Sequence[Mapping],
              columns: int = MAX_COLUMNS) -> "TrainSummary":
    out = cls(domains, columns)
    for r in rows:
      out.add(r)
    return out


def share_grid(train: TrainSummary) -> tuple[list[str], str, np.ndarray, list[list[int]]]:
  """(domains grouped by family, the metric prefix used, [domain, column]
  shares, each column's [first, last] step).

  The share is the curriculum's probability of the domain (``weight/<d>``)
  where the run logs it, else the domain's share of the trained batch
  (``share/<d>``: with many domains a batch holds each in steps of
  1/prompts, mostly 0). A column is the mean over its steps (one step per
  column while the run has at most ``MAX_COLUMNS`` steps)."""
  order = sorted(range(len(train.domains)), key=lambda i: (domain_family(train.domains[i]),
                                                            train.domains[i]))
  used = len(train.steps)
  weights = train.cells["weight/"][1][:used]
  prefix = "weight/" if order and weights[:, order[0]].any() else "share/"
  total, count = (x[:used] for x in train.cells[prefix])
  with np.errstate(invalid="ignore", divide="ignore"):
    grid = np.where(count > 0, total / np.maximum(count, 1), np.nan).T[order]
  return [train.domains[i] for i in order], prefix, grid, train.steps


def plot_share_heatmap(train: TrainSummary, path: str) -> None:
  """Each domain's sampling share over the logged steps (``share_grid``): one
  row per domain (grouped by family), one column per step (or span of steps)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  order, prefix, grid, steps = share_grid(train)
  height = min(max(3.0, 0.05 * len(order) + 1.5), 30.0)
  fig, ax = plt.subplots(figsize=(9, height), dpi=110)
  im = ax.imshow(np.nan_to_num(grid), aspect="auto", interpolation="nearest", cmap="viridis",
                 extent=(steps[0][0] - 0.5, steps[-1][1] + 0.5, len(order) - 0.5, -0.5) if steps
                 else None)
  if len(order) <= 40:
    ax.set_yticks(range(len(order)), [d.removeprefix("rlpt/") for d in order], fontsize=6)
  else:  # one label per family, at its first row
    starts: dict[str, int] = {}
    for i, d in enumerate(order):
      starts.setdefault(domain_family(d), i)
    ax.set_yticks(list(starts.values()), list(starts), fontsize=7)
  ax.set_xlabel("RL step")
  what = "curriculum probability" if prefix == "weight/" else "share of the batch"
  ax.set_title(f"Sampling share of each of {len(order)} domains ({what})")
  fig.colorbar(im, ax=ax, label=what)
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def domain_rows(base: Mapping, final: Mapping, domains: Sequence[str],
                train: TrainSummary | None = None, eval_tasks: Mapping[str, float] | None = None
                ) -> list[dict]:
  """One dict per domain, sorted by gain (the first measure's final - base, then
  domain): family, base / final / gain per measure, and with ``train`` (over
  the logged training steps) its mean sampling share, its groups' informative
  share, tokens sampled and environment seconds; with ``eval_tasks``, the
  held-out tasks evaluated per domain (per measure, over every evaluation)."""
  measures = _present([base])
  index = {d: i for i, d in enumerate(train.domains)} if train is not None else {}
  out = []
  for d in domains:
    row: dict = {"domain": d, "family": domain_family(d)}
    for key, _ in measures:
      b, f = _get(base, f"{key}/{d}"), _get(final, f"{key}/{d}")
      row.update({f"{key}_base": b, f"{key}_final": f, f"{key}_gain": f - b})
    if train is not None and train.rows:
      row.update(train.domain_figures(index[d]))
    if eval_tasks is not None:
      row["eval_tasks"] = float(eval_tasks.get(d, 0.0))
    out.append(row)
  if measures:
    gain = f"{measures[0][0]}_gain"
    out.sort(key=lambda r: (-(r[gain] if not math.isnan(r[gain]) else -math.inf), r["domain"]))
  return out


def write_csv(rows: Sequence[Mapping], path: str) -> None:
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["domain"])
    w.writeheader()
    for r in rows:
      w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def success_table(base: Mapping[str, float], final: Mapping[str, float],
                  domains: Sequence[str]) -> str:
  """Markdown table of base vs final held-out success per domain, per measure,
  sorted by the first measure's gain; the mean last."""
  measures = _present([base])
  # Held-out samples masked as infrastructure errors (base / final), where the
  # rows count them: a success raised by masked tasks shows beside it.
  masked = [key for key, _ in measures if f"{key}{MASKED}/total" in base or f"{key}{MASKED}/total" in final]
  header = ("| domain |" + "".join(f" {label}: base | final | change |" for _, label in measures)
            + "".join(f" {label}: masked |" for key, label in measures if key in masked))
  lines = [header, "|---|" + "---:|---:|---:|" * len(measures) + "---:|" * len(masked)]
  order = [r["domain"] for r in domain_rows(base, final, domains)]
  for d in order + ["mean"]:
    cells = []
    for key, _ in measures:
      b, f = _get(base, f"{key}/{d}"), _get(final, f"{key}/{d}")
      cells.append(f" {b:.3f} | {f:.3f} | {f - b:+.3f} |")
    where = "total" if d == "mean" else d
    for key in masked:
      mb, mf = _get(base, f"{key}{MASKED}/{where}"), _get(final, f"{key}{MASKED}/{where}")
      cells.append(f" {_count(mb)} / {_count(mf)} |")
    lines.append(f"| {d.removeprefix('rlpt/')} |" + "".join(cells))
  return "\n".join(lines)


def _count(x: float) -> str:
  return "-" if math.isnan(x) else f"{x:.0f}"
