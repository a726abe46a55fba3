"""Task identities and the per-step draw of tasks across domains.

A task is (domain id, seed, split): the environment regenerates it
deterministically from that triple, so a task costs nothing to store and a
run's data order is a function of the sampler's state alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from rlpt.keys import seeded_rng


class Task(NamedTuple):
  domain: str
  seed: int
  split: str


class TaskSampler:
  """Draws tasks with fixed domain weights: a domain by weight, then a fresh seed.

  Deterministic in ``seed`` (an int, or a stream of `rlpt.keys.numpy_rng`). Used for
  pre-training, benchmarks and the draft's warm-up; RL runs
  draw through the checkpointable ``TaskStream`` with an adaptive curriculum.
  """

  def __init__(self, domains: Sequence[str], weights: Sequence[float] | None = None,
               seed: int | np.random.Generator = 0):
    self.domains = tuple(domains)
    w = np.ones(len(self.domains)) if not weights else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(self.domains),) or (w < 0).any() or w.sum() <= 0:
      raise ValueError(f"weights {list(w)} must be {len(self.domains)} non-negative numbers with a positive sum.")
    self.weights = w / w.sum()
    self._rng = seed if isinstance(seed, np.random.Generator) else seeded_rng("task_sampler", seed)

  def sample(self, n: int) -> list[Task]:
    """n tasks, each domain drawn by this sampler's fixed weights."""
    idx = self._rng.choice(len(self.domains), size=n, p=self.weights)
    seeds = self._rng.integers(0, 2**62, size=n)
    return [Task(self.domains[i], int(s), "train") for i, s in zip(idx, seeds)]


def eval_tasks(domains: Sequence[str], per_domain: int, seed: int = 1234) -> list[Task]:
  """A fixed held-out set: the same tasks at every evaluation of a run."""
  rng = seeded_rng("eval_set", seed)
  return [Task(d, int(s), "eval") for d in domains for s in rng.integers(0, 2**62, size=per_domain)]
