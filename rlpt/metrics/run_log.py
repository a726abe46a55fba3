"""A run's metrics: `RunLog`, what the loop logs and what it reports at the end."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from rlpt.metrics.report import (domain_rows, plot_eval_curves, plot_share_heatmap, success_table,
                                 write_csv)
from rlpt.metrics.writer import JsonlLog, MetricsWriter


class RunLog:
  """``metrics.jsonl``, ``tasks.jsonl`` and TensorBoard in ``workdir``
  (``primary`` process only) and the history of every row, which every
  process keeps (it is checkpointed with the run).

  ``tasks.jsonl``: per step, the tasks the update trained on, one per prompt
  group in batch order: ``{"step": s, "tasks": [[domain, seed, split], ...]}``
  (``gymnasium.make(domain).reset(seed=seed, options={"split": split})``
  replays each), so another framework can train on exactly the same draws.
  """

  def __init__(self, workdir: str, domains: Sequence[str], primary: bool):
    self.workdir, self.domains, self.primary = workdir, tuple(domains), primary
    self.writer = MetricsWriter(workdir) if primary else None
    self.tasks = JsonlLog(os.path.join(workdir, "tasks.jsonl")) if primary else None
    self.history: dict[str, list[dict]] = {"train": [], "eval": []}

  def log_tasks(self, step: int, records: Sequence[Mapping], group_size: int) -> None:
    """The trained batch's tasks (its rows' records, ``group_size`` rows per task)."""
    if self.tasks is not None:
      self.tasks.append({"step": int(step), "tasks": [
          [r["domain"], int(r["seed"]), r["split"]] for r in records[::group_size]]})

  def log(self, step: int, kind: str, metrics: Mapping[str, float]) -> None:
    """One row: ``kind`` "train" or "eval" (kept in the history) or another
    kind (written only)."""
    if self.writer is not None:
      self.writer.write(step, kind, metrics)
    if kind in self.history:
      self.history[kind].append({"step": step, **metrics})

  def rewind(self, last_step: int) -> None:
    """Cuts the files back to ``last_step`` (-1: empty), for a resume or a fresh start."""
    if self.writer is not None:
      self.writer.rewind(last_step)
      self.tasks.rewind(last_step)

  def load_history(self, history: Mapping[str, Iterable[dict]]) -> None:
    self.history = {k: list(v) for k, v in history.items()}

  def log_saves(self, timings: Iterable) -> None:
    """One ``checkpoint`` row per committed save (`rlpt.checkpoint.SaveTiming`)."""
    for t in timings:
      self.log(t.step, "checkpoint", {"checkpoint/save_seconds": t.total,
                                      "checkpoint/blocked_seconds": t.blocked})

  def report(self, step: int) -> dict:
    """The end-of-run artefacts in ``workdir``: ``summary.md`` (held-out success,
    first evaluation vs last, per domain sorted by gain), ``domains.csv`` (the
    same with each domain's training share, informative groups, tokens,
    environment seconds and evaluated tasks), ``eval_success.png`` (curves per
    domain, or per family past 12 domains) and ``domain_shares.png`` (each
    domain's sampling share over steps). Returns {"base", "final", "table", "domains"}."""
    evals = [{k: v for k, v in row.items() if k != "step"} for row in self.history["eval"]]
    base, final = evals[0], evals[-1]
    table = success_table(base, final, self.domains)
    rows = domain_rows(base, final, self.domains, self.history["train"], self.history["eval"])
    if self.primary:
      plot_eval_curves(self.history["eval"], self.domains,
                       os.path.join(self.workdir, "eval_success.png"))
      if self.history["train"]:
        plot_share_heatmap(self.history["train"], self.domains,
                           os.path.join(self.workdir, "domain_shares.png"))
      write_csv(rows, os.path.join(self.workdir, "domains.csv"))
      with open(os.path.join(self.workdir, "summary.md"), "w") as f:
        f.write(f"# Held-out success: base vs after {step} RL steps\n\n{table}\n")
    return {"base": base, "final": final, "table": table, "domains": rows}

  def close(self) -> None:
    if self.writer is not None:
      self.writer.close()
      self.tasks.close()
