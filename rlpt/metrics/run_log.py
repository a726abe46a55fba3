"""A run's metrics: `RunLog`, what the loop logs and what it reports at the end."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from rlpt.metrics.report import (MAX_CURVES, MEASURES, TrainSummary, domain_rows, plot_eval_curves,
                                 plot_share_heatmap, success_table, write_csv)
from rlpt.metrics.writer import JsonlLog, MetricsWriter


class RunLog:
  """``metrics.jsonl``, ``tasks.jsonl`` and TensorBoard in ``workdir``
  (``primary`` process only), and what the end-of-run report needs, which
  every process keeps and checkpoints with the run (``state_dict``): the first
  and the latest evaluation whole, the curves' points of every evaluation
  (means and families; each domain's too for runs of at most ``MAX_CURVES``
  domains), the tasks evaluated per domain and the training rows' summary
  (``TrainSummary``). Its size grows with the number of evaluations, not with
  the number of steps or of domains times steps; metrics.jsonl has every row.

  ``tasks.jsonl``: per step, the tasks the update trained on, one per prompt
  group in batch order: ``{"step": s, "tasks": [[domain, seed, split], ...]}``
  (``gymnasium.make(domain).reset(seed=seed, options={"split": split})``
  replays each), so another framework can train on exactly the same draws.
  """

  def __init__(self, workdir: str, domains: Sequence[str], primary: bool):
    self.workdir, self.domains, self.primary = workdir, tuple(domains), primary
    self.writer = MetricsWriter(workdir) if primary else None
    self.tasks = JsonlLog(os.path.join(workdir, "tasks.jsonl")) if primary else None
    self._reset()

  def _reset(self) -> None:
    self.train = TrainSummary(self.domains)
    self.first_eval: dict | None = None
    self.last_eval: dict | None = None
    self.curves: list[dict] = []            # each evaluation's plotted points
    self.eval_tasks: dict[str, float] = {}  # held-out tasks per domain, every evaluation

  def log_tasks(self, step: int, records: Sequence[Mapping], group_size: int) -> None:
    """The trained batch's tasks (its rows' records, ``group_size`` rows per task)."""
    if self.tasks is not None:
      self.tasks.append({"step": int(step), "tasks": [
          [r["domain"], int(r["seed"]), r["split"]] for r in records[::group_size]]})

  def log(self, step: int, kind: str, metrics: Mapping[str, float]) -> None:
    """One row: ``kind`` "train" or "eval" (kept for the report) or another
    kind (written only)."""
    if self.writer is not None:
      self.writer.write(step, kind, metrics)
    row = {"step": step, **metrics}
    if kind == "train":
      self.train.add(row)
    elif kind == "eval":
      self._add_eval(row)

  def _add_eval(self, row: dict) -> None:
    if self.first_eval is None:
      self.first_eval = row
    self.last_eval = row
    keep = ("step",) + tuple(f"{m}/mean" for m, _ in MEASURES)
    families = tuple(f"family_{m}/" for m, _ in MEASURES)
    per_domain = len(self.domains) <= MAX_CURVES
    self.curves.append({k: v for k, v in row.items()
                        if k in keep or k.startswith(families)
                        or (per_domain and k.startswith(tuple(f"{m}/" for m, _ in MEASURES)))})
    first = next((m for m, _ in MEASURES if f"{m}/mean" in row), None)
    if first is not None and "eval/tasks" in row:
      per = row["eval/tasks"] / row["eval/domains"]
      for d in self.domains:
        if f"{first}/{d}" in row:
          self.eval_tasks[d] = self.eval_tasks.get(d, 0.0) + per

  def rewind(self, last_step: int) -> None:
    """Cuts the files back to ``last_step`` (-1: empty), for a resume or a fresh start."""
    if self.writer is not None:
      self.writer.rewind(last_step)
      self.tasks.rewind(last_step)

  def state_dict(self) -> dict:
    return {"train": self.train.state_dict(), "first_eval": self.first_eval,
            "last_eval": self.last_eval, "curves": self.curves, "eval_tasks": self.eval_tasks}

  def load_history(self, history: Mapping[str, Iterable[Mapping]]) -> None:
    """The report state of a run's logged rows ({"train": [...], "eval": [...]},
    each row with its ``step``), as if they had been logged (checkpoints that
    saved the rows themselves)."""
    self._reset()
    for row in history.get("train", ()):
      self.train.add(row)
    for row in history.get("eval", ()):
      self._add_eval(dict(row))

  def load_state_dict(self, state: Mapping) -> None:
    self.train.load_state_dict(state["train"])
    self.first_eval, self.last_eval = state["first_eval"], state["last_eval"]
    self.curves, self.eval_tasks = list(state["curves"]), dict(state["eval_tasks"])

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
    if self.first_eval is None:
      raise ValueError("no evaluation was logged: the report compares the first with the last")
    base, final = ({k: v for k, v in r.items() if k != "step"}
                   for r in (self.first_eval, self.last_eval))
    table = success_table(base, final, self.domains)
    rows = domain_rows(base, final, self.domains, self.train, self.eval_tasks)
    if self.primary:
      plot_eval_curves(self.curves, self.domains, os.path.join(self.workdir, "eval_success.png"))
      if self.train.rows:
        plot_share_heatmap(self.train, os.path.join(self.workdir, "domain_shares.png"))
      write_csv(rows, os.path.join(self.workdir, "domains.csv"))
      with open(os.path.join(self.workdir, "summary.md"), "w") as f:
        f.write(f"# Held-out success: base vs after {step} RL steps\n\n{table}\n")
    return {"base": base, "final": final, "table": table, "domains": rows}

  def close(self) -> None:
    if self.writer is not None:
      self.writer.close()
      self.tasks.close()
