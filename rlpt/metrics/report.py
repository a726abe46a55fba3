"""End-of-run artefacts: held-out success curves (PNG) and a base-vs-final table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def plot_eval_curves(rows: Sequence[Mapping], domains: Sequence[str], path: str) -> None:
  """Plots ``success/<domain>`` and their mean from eval rows against step."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  steps = [r["step"] for r in rows]
  fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
  for d in domains:
    ax.plot(steps, [r[f"success/{d}"] for r in rows], marker="o", ms=3, lw=1.2,
            label=d.removeprefix("rlpt/"))
  ax.plot(steps, [r["success/mean"] for r in rows], color="black", lw=2.5, label="mean")
  ax.set_xlabel("RL step")
  ax.set_ylabel("held-out success")
  ax.set_ylim(-0.02, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7, ncol=2, loc="best")
  ax.set_title("Held-out success per domain (greedy decoding)")
  fig.tight_layout()
  fig.savefig(path)
  plt.close(fig)


def success_table(base: Mapping[str, float], final: Mapping[str, float],
                  domains: Sequence[str]) -> str:
  """Markdown table of base vs final held-out success per domain."""
  lines = ["| domain | base | final | change |", "|---|---:|---:|---:|"]
  for d in list(domains) + ["mean"]:
    b, f = base[f"success/{d}"], final[f"success/{d}"]
    lines.append(f"| {d.removeprefix('rlpt/')} | {b:.3f} | {f:.3f} | {f - b:+.3f} |")
  return "\n".join(lines)
