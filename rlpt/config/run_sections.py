"""The sections of a run around its RL core: the curriculum over domains, the
evaluation and the checkpoints (fields of rlpt.config.TrainConfig)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlpt.config.schema import _require


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
  """How training tasks are spread over domains (rlpt.curriculum).

  strategy: uniform | fixed (uses domains.weights) | temperature | success_band
    | learning_progress. ``params`` holds the strategy's own knobs, e.g.
    {"low": 0.1, "high": 0.9} for success_band.
  adaptive_difficulty: the domains' easy / medium / hard variants form
    ladders; the strategy spreads the batch over ladders and each ladder's
    draws move up a level when its success reaches ``difficulty["up"]`` and
    down when it falls to ``difficulty["down"]`` (rlpt.curriculum.difficulty;
    also "alpha", "min_samples"). Off by default.
  """

  strategy: str = "uniform"
  params: dict[str, Any] = dataclasses.field(default_factory=dict)
  priorities: dict[str, float] = dataclasses.field(default_factory=dict)
  min_share: float = 0.0
  max_share: float = 1.0
  adaptive_difficulty: bool = False
  difficulty: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  every: int = 25
  tasks_per_domain: int = 64
  temperature: float = 0.0
  sampled: bool = True
  # Plays of each task in the sampled measure, averaged: its pass@1 over
  # tasks_per_domain x samples episodes (a smaller spread at the same tasks).
  samples: int = 1
  # Draws the held-out tasks: fixed, so runs of every training seed are
  # measured on the same tasks (1: the set seed 0 has always drawn).
  seed: int = 1
  # 0: every evaluation covers every domain. N > 0 (runs over many domains):
  # the evaluations before training and after the last step cover every
  # domain; those between cover N domains each, in turn (domain order,
  # wrapping), so an evaluation costs N x tasks_per_domain episodes.
  domains_per_eval: int = 0

  def __post_init__(self):
    _require(self.every > 0, f"eval.every must be > 0, got {self.every}.")
    _require(self.domains_per_eval >= 0,
             f"eval.domains_per_eval must be >= 0 (0: every domain), got {self.domains_per_eval}.")
    _require(self.tasks_per_domain > 0,
             f"eval.tasks_per_domain must be > 0, got {self.tasks_per_domain}.")
    _require(self.temperature >= 0, f"eval.temperature must be >= 0, got {self.temperature}.")
    _require(self.samples > 0, f"eval.samples must be > 0, got {self.samples}.")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Complete run checkpoints under ``workdir/checkpoints`` (rlpt.checkpoint.manager).

  every: save after every ``every`` steps and after the last one; 0 turns
    checkpoints (and resuming) off.
  keep: how many of the latest checkpoints to keep.
  keep_best: also keep the checkpoint with the best ``best_metric``, a held-out
    metric of the evaluation at the checkpoint's step (an ``eval`` row of
    metrics.jsonl, e.g. ``success/mean``), ranked by ``best_mode`` ("max" or
    "min"). Steps saved without an evaluation never count as best, so make
    ``every`` a multiple of ``eval.every``.
  async_save: write in a background thread; the loop waits only for the
    device-to-host copy (and for the previous save, if still running).
  export: write the final policy as a plain parameter checkpoint to
    ``workdir/export`` (rlpt.checkpoint.save_model).
  """

  every: int = 25
  keep: int = 3
  keep_best: bool = True
  best_metric: str = "success/mean"
  best_mode: str = "max"
  async_save: bool = True
  export: bool = True

  def __post_init__(self):
    _require(self.every >= 0, f"checkpoint.every must be >= 0 (0 = no checkpoints), got "
             f"{self.every}.")
    _require(self.keep >= 1, f"checkpoint.keep must be >= 1, got {self.keep}.")
    _require(not self.keep_best or bool(self.best_metric),
             "checkpoint.best_metric is empty but checkpoint.keep_best=True; name a logged "
             "metric such as 'success/mean'.")
    _require(self.best_mode in ("max", "min"),
             f"checkpoint.best_mode must be 'max' or 'min', got '{self.best_mode}'.")
