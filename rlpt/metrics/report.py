"""End-of-run artefacts: held-out success curves (PNG) and a base-vs-final table.

Two success measures are reported when present: ``sampled_success`` (pass@1
of the policy as it is trained, sampling at the rollout temperature: what RL
optimises) and ``success`` (decoding with eval.temperature, greedy by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

MEASURES = (("sampled_success", "sampled pass@1"), ("success", "greedy"))


def _present(rows: Sequence[Mapping]) -> list[tuple[str, str]]:
  return [(key, label) for key, label in MEASURES if rows and f"{key}/mean" in rows[0]]


def plot_eval_curves(rows: Sequence[Mapping], domains: Sequence[str], path: str) -> None:
  """One panel per success measure: each domain and the mean against step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  measures = _present(rows)
  steps = [r["step"] for r in rows]
  fig, axes = plt.subplots(1, len(measures), figsize=(6.5 * len(measures), 4.5), dpi=110,
                           squeeze=False)
  for ax, (key, label) in zip(axes[0], measures):
    for d in domains:
      ax.plot(steps, [r[f"{key}/{d}"] for r in rows], marker="o", ms=3, lw=1.2,
              label=d.removeprefix("rlpt/"))
    ax.plot(steps, [r[f"{key}/mean"] for r in rows], color="black", lw=2.5, label="mean")
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(f"Held-out success per domain ({label})")
  axes[0][-1].legend(fontsize=7, ncol=2, loc="best")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def success_table(base: Mapping[str, float], final: Mapping[str, float],
                  domains: Sequence[str]) -> str:
  """Markdown table of base vs final held-out success per domain, per measure."""
  measures = _present([base])
  header = "| domain |" + "".join(f" {label}: base | final | change |" for _, label in measures)
  lines = [header, "|---|" + "---:|---:|---:|" * len(measures)]
  for d in list(domains) + ["mean"]:
    cells = []
    for key, _ in measures:
      b, f = base[f"{key}/{d}"], final[f"{key}/{d}"]
      cells.append(f" {b:.3f} | {f:.3f} | {f - b:+.3f} |")
    lines.append(f"| {d.removeprefix('rlpt/')} |" + "".join(cells))
  return "\n".join(lines)
