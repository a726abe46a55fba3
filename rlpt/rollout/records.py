"""What an environment pool hands back: prompts, episodes held open, steps and
their grades (shared by the local and the Ray pools)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from rlpt.data import Task


class Prompt(NamedTuple):
  task: Task
  text: str
  info: dict


class Outcome(NamedTuple):
  """What an episode has come to after a step, as the trainer scores it: the
  reward so far, success, the environment's verdict (its `environments.Grade`
  in the trainer's terms), whether infrastructure failed (the sample is
  masked, never scored), and the step's info."""

  reward: float
  success: bool
  verdict: str
  infra_error: bool
  info: dict


class Episode:
  """One environment instance held from reset until its episode ends."""

  __slots__ = ("task", "prompt", "info", "env", "done", "reward", "turns", "actions", "env_s")

  def __init__(self, task: Task, env, prompt: str, info: dict):
    self.task, self.env, self.prompt, self.info = task, env, prompt, info
    self.done = False
    self.reward = 0.0  # sum of the rewards of every step so far
    self.turns = 0
    self.actions: list[str] = []  # accepted actions, replayed after an infrastructure failure
    self.env_s = 0.0  # seconds its environment steps ran in a worker (retries included)


class Step(NamedTuple):
  """One environment step of an episode.

  observation: text to append to the conversation when the episode goes on
  ("" when it ended). graded: the verdict of this step, with ``reward`` the
  episode's total so far. env_s: the seconds the episode's environment steps
  have run so far (failed attempts included).
  """

  observation: str
  done: bool
  graded: Outcome
  env_s: float = 0.0


def check_step(episodes: Sequence, actions: Sequence[str]) -> None:
  """One action per running episode, or a clear error."""
  if len(episodes) != len(actions):
    raise ValueError(f"{len(episodes)} episodes but {len(actions)} actions.")
  for ep in episodes:
    if ep.done:
      raise RuntimeError(f"episode of {ep.task} already ended")
