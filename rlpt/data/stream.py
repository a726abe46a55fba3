"""The training task stream: a checkpointable grain iterator over the domain mixture.

The curriculum changes the domain shares online from the rewards it sees, so
the tasks of a run cannot be a fixed, precomputed dataset. What can be fixed
is the randomness: draw ``i`` of the stream is a pure function of
``(seed, i)`` giving one seed for the curriculum's choice of domains and one
task seed per prompt. ``next_tasks`` applies the sampler's current shares with
that seed. A resumed run that restores the grain iterator state (the index of
the next draw) and the curriculum's state draws exactly the same tasks.
"""

from __future__ import annotations

import functools

import grain
import numpy as np

from rlpt.data.tasks import Task
from rlpt.keys import seeded_rng

# Draws a stream can hand out; a run makes one per rollout, so this never ends.
_MAX_DRAWS = 2**62


def _draw(index: int, *, seed: int, n: int) -> dict[str, np.ndarray]:
  """Draw ``index``: {"domain_seed": int64 [], "task_seeds": int64 [n]} in [0, 2**62)."""
  rng = seeded_rng("task_draw", seed, index)
  return {"domain_seed": rng.integers(0, 2**62), "task_seeds": rng.integers(0, 2**62, size=n)}


class TaskStream:
  """``n`` training tasks per ``next_tasks`` call, domains chosen by a curriculum sampler.

  ``state_dict`` / ``load_state_dict`` hold the grain iterator's state (JSON).
  """

  def __init__(self, seed: int, n: int):
    if n <= 0:
      raise ValueError(f"a task stream needs n > 0 tasks per draw, got {n}.")
    self.n = n
    dataset = grain.MapDataset.range(_MAX_DRAWS).map(functools.partial(_draw, seed=seed, n=n))
    # No prefetch threads: a draw costs microseconds and the loop asks for one
    # per rollout; threads would only compete with the environments for CPUs.
    self._it = iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=0,
                                                              prefetch_buffer_size=0)))

  def next_tasks(self, domain_sampler) -> list[Task]:
    """The next ``n`` tasks; ``domain_sampler.sample(n, rng)`` picks their domains."""
    draw = next(self._it)
    domains = domain_sampler.sample(self.n, seeded_rng("task_domains", draw["domain_seed"]))
    return [Task(d, int(s), "train") for d, s in zip(domains, draw["task_seeds"])]

  def state_dict(self) -> dict:
    return {"grain": self._it.get_state()}

  def load_state_dict(self, state: dict) -> None:
    self._it.set_state(state["grain"])
