"""The environment pool's interface: what the rollout asks of the environments.

`EnvironmentPool` is the one interface the rollout (`EpisodeRunner`,
`RolloutSource`) plays episodes through; `rlpt.rollout.envs.EnvPool` (threads
on this host) and `rlpt.rollout.ray_backend.RayEnvPool` (Ray actors)
implement it, and so can a pool of your own (a remote sandbox service, a
benchmark's slow environments): give it to ``Trainer(..., env_pool=...)``.

An episode holds one environment from ``start`` until it ends (``Step.done``)
or is abandoned. Infrastructure failures come back as steps with
``graded.infra_error`` set, never as the model's failure.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Protocol

from rlpt.data import Task
from rlpt.rollout.records import Prompt, Step


class PendingBatch(Protocol):
  """Steps in flight (``EnvironmentPool.submit``): ``wait`` returns finished
  ones as (index in submission order, Step), ``add`` submits more, ``len`` is
  the number not yet returned."""

  def add(self, episodes: Sequence, actions: Sequence[str]) -> None: ...

  def wait(self, timeout: float | None = None) -> list[tuple[int, Step]]: ...

  def __len__(self) -> int: ...


class EnvironmentPool(abc.ABC):
  """Environments for episodes: start, step (all at once or as they finish),
  abandon; prompts without an episode (``reset``); metrics; close."""

  @abc.abstractmethod
  def start(self, tasks: Sequence[Task]) -> list:
    """One episode per task, each holding its environment after ``reset``."""

  @abc.abstractmethod
  def step(self, episodes: Sequence, actions: Sequence[str]) -> list[Step]:
    """Steps every episode with its action; returns when all are done."""

  @abc.abstractmethod
  def submit(self, episodes: Sequence, actions: Sequence[str]) -> PendingBatch:
    """Starts stepping every episode; the steps come back as they finish."""

  @abc.abstractmethod
  def abandon(self, episodes: Sequence) -> None:
    """Ends episodes the caller stops early; their environments go back."""

  @abc.abstractmethod
  def reset(self, tasks: Sequence[Task]) -> list[Prompt]:
    """The tasks' prompts (observation and reset info), holding no environment."""

  @abc.abstractmethod
  def stats(self) -> dict[str, float]:
    """Metrics since the last call (latencies, retries, masked steps, ...)."""

  @abc.abstractmethod
  def close(self) -> None:
    """Releases every environment and worker."""
