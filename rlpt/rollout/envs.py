"""Drives gymnasium text environments from the trainer, concurrently.

rlpt reaches environments only through ``gymnasium.make`` / ``reset`` /
``step``. A task is regenerated from (domain, seed, split) by ``reset``, so
grading G completions of one prompt is G independent (reset, step) pairs that
can run on any free environment instance in parallel; the sandboxed
environments release the GIL while their worker runs the candidate.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Sequence
from typing import NamedTuple

import gymnasium

from rlpt.data import Task


class Prompt(NamedTuple):
  task: Task
  text: str
  info: dict


class Graded(NamedTuple):
  reward: float
  success: bool
  verdict: str
  infra_error: bool
  info: dict


class EnvPool:
  """Per-domain pools of environment instances behind a thread pool."""

  def __init__(self, domains: Sequence[str], workers: int = 4):
    import environments  # noqa: F401  (registers the domains with gymnasium)

    registered = set(gymnasium.registry)
    missing = [d for d in domains if d not in registered]
    if missing:
      from environments import registry
      for d in missing:
        registry.get(d)  # raises with close matches
    self._free: dict[str, collections.deque] = {d: collections.deque() for d in domains}
    self._lock = threading.Lock()
    self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers,
                                                           thread_name_prefix="rlpt-env")

  def _acquire(self, domain: str):
    with self._lock:
      if domain not in self._free:
        raise ValueError(f"Domain '{domain}' is not in this pool ({sorted(self._free)}).")
      if self._free[domain]:
        return self._free[domain].pop()
    return gymnasium.make(domain, disable_env_checker=True)

  def _release(self, domain: str, env) -> None:
    with self._lock:
      self._free[domain].append(env)

  def _reset(self, task: Task) -> Prompt:
    env = self._acquire(task.domain)
    try:
      obs, info = env.reset(seed=task.seed, options={"split": task.split})
    finally:
      self._release(task.domain, env)
    return Prompt(task, obs, info)

  def _grade(self, task: Task, action: str) -> Graded:
    env = self._acquire(task.domain)
    try:
      env.reset(seed=task.seed, options={"split": task.split})
      _, reward, _, _, info = env.step(action)
    except Exception as e:  # noqa: BLE001  An environment bug must not kill the run.
      self._release(task.domain, env)
      return Graded(0.0, False, "SANDBOX_ERROR", True, {"feedback": f"{type(e).__name__}: {e}"})
    self._release(task.domain, env)
    return Graded(float(reward), bool(info.get("success", reward >= 1.0)),
                  str(info.get("verdict", "")), bool(info.get("infra_error", False)), info)

  def reset(self, tasks: Sequence[Task]) -> list[Prompt]:
    return list(self._executor.map(self._reset, tasks))

  def grade(self, tasks: Sequence[Task], actions: Sequence[str]) -> list[Graded]:
    if len(tasks) != len(actions):
      raise ValueError(f"{len(tasks)} tasks but {len(actions)} actions.")
    return list(self._executor.map(self._grade, tasks, actions))

  def close(self) -> None:
    self._executor.shutdown(wait=True)
    with self._lock:
      for envs in self._free.values():
        while envs:
          envs.pop().close()
