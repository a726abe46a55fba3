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


def share_grid(train_rows: Sequence[Mapping], domains: Sequence[str]
               ) -> tuple[list[str], str, np.ndarray]:
  """(domains grouped by family, the metric prefix used, [domain, step] shares).

  The share is the curriculum's probability of the domain (``weight/<d>``)
  where the run logs it, else the domain's share of the trained batch
  (``share/<d>``: with many domains a batch holds each in steps of
  1/prompts, mostly 0)."""
  order = sorted(domains, key=lambda d: (domain_family(d), d))
  prefix = "weight/" if order and any(f"weight/{order[0]}" in r for r in train_rows) else "share/"
  return order, prefix, np.array([[_get(r, f"{prefix}{d}") for r in train_rows] for d in order])


def plot_share_heatmap(train_rows: Sequence[Mapping], domains: Sequence[str], path: str) -> None:
  """Each domain's sampling share over the logged steps (``share_grid``): one
  row per domain (grouped by family), one column per step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  order, prefix, grid = share_grid(train_rows, domains)
  steps = [r["step"] for r in train_rows]
  height = min(max(3.0, 0.05 * len(order) + 1.5), 30.0)
  fig, ax = plt.subplots(figsize=(9, height), dpi=110)
  im = ax.imshow(np.nan_to_num(grid), aspect="auto", interpolation="nearest", cmap="viridis",
                 extent=(steps[0] - 0.5, steps[-1] + 0.5, len(order) - 0.5, -0.5) if steps
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
                train_rows: Sequence[Mapping] = (), eval_rows: Sequence[Mapping] = ()) -> list[dict]:
  """One dict per domain, sorted by gain (the first measure's final - base, then
  domain): family, base / final / gain per measure, and over the logged training
  steps its mean sampling share, its groups' informative share, tokens sampled
  and environment seconds; with ``eval_rows``, the held-out tasks evaluated
  (per measure, over every evaluation)."""
  measures = _present([base])
  out = []
  for d in domains:
    row: dict = {"domain": d, "family": domain_family(d)}
    for key, _ in measures:
      b, f = _get(base, f"{key}/{d}"), _get(final, f"{key}/{d}")
      row.update({f"{key}_base": b, f"{key}_final": f, f"{key}_gain": f - b})
    if train_rows:
      groups = [_get(r, f"groups/{d}") for r in train_rows]
      inf = [_get(r, f"informative/{d}") for r in train_rows]
      n = sum(g for g in groups if not math.isnan(g))
      row["train_share"] = float(np.mean([_get(r, f"share/{d}") for r in train_rows]))
      row["groups"] = n
      row["informative_share"] = (sum(g * i for g, i in zip(groups, inf) if not math.isnan(g)) / n
                                  if n else math.nan)
      row["sampled_tokens"] = sum(x for r in train_rows
                                  if not math.isnan(x := _get(r, f"sampled_tokens/{d}")))
      row["env_seconds"] = sum(x for r in train_rows
                               if not math.isnan(x := _get(r, f"env_seconds/{d}")))
    if eval_rows:
      row["eval_tasks"] = sum(r["eval/tasks"] / r["eval/domains"] for r in eval_rows
                              if f"{measures[0][0]}/{d}" in r and "eval/tasks" in r)
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
  header = "| domain |" + "".join(f" {label}: base | final | change |" for _, label in measures)
  lines = [header, "|---|" + "---:|---:|---:|" * len(measures)]
  order = [r["domain"] for r in domain_rows(base, final, domains)]
  for d in order + ["mean"]:
    cells = []
    for key, _ in measures:
      b, f = _get(base, f"{key}/{d}"), _get(final, f"{key}/{d}")
      cells.append(f" {b:.3f} | {f:.3f} | {f - b:+.3f} |")
    lines.append(f"| {d.removeprefix('rlpt/')} |" + "".join(cells))
  return "\n".join(lines)
