"""Slow environments for benchmarks: an `EnvPool` whose sandbox domains' steps
take longer, as a remote or heavy sandbox would.

    pool = SlowEnvPool.from_train(cfg, latency_s=0.2, dist="exponential")
    trainer = Trainer(cfg, workdir, env_pool=pool)

Every step of a sandbox-class domain (code, shell) sleeps ``latency_s`` first:
exactly that (``dist="fixed"``) or exponentially distributed with that mean
(``"exponential"``: a long tail), drawn from a stream seeded by ``seed``. The
delay sits in the environment (a gymnasium wrapper made by ``make_env``), so
the pool's scheduling, retries and replays see it as they would a slow
sandbox. Production pools carry no such switch.
"""

from __future__ import annotations

import threading
import time

import gymnasium
import numpy as np

from rlpt.rollout.envs import SANDBOX, EnvPool
from rlpt.rollout.pools import episode_options

DISTRIBUTIONS = ("fixed", "exponential")


class SlowEnvPool(EnvPool):
  """`EnvPool` (same arguments) whose sandbox domains' steps sleep first."""

  def __init__(self, *args, latency_s: float, dist: str = "fixed", seed: int = 0, **kwargs):
    if latency_s < 0 or dist not in DISTRIBUTIONS:
      raise ValueError(f"latency_s must be >= 0 and dist one of {DISTRIBUTIONS}, got "
                       f"{latency_s!r}, {dist!r}.")
    super().__init__(*args, **kwargs)
    self.latency_s, self.dist = latency_s, dist
    self._rng, self._rng_lock = np.random.default_rng(seed), threading.Lock()

  @classmethod
  def from_train(cls, cfg, **slow) -> "SlowEnvPool":
    """The pool a run of ``cfg`` (a TrainConfig) would make, slowed by ``slow``."""
    return cls(cfg.domains.ids, cfg.env, **episode_options(cfg.domains, cfg.rollout), **slow)

  def make_env(self, domain: str):
    env = super().make_env(domain)
    if not self.latency_s or self.resource(domain) != SANDBOX:
      return env
    return _Delayed(env, self.delay)

  def delay(self) -> float:
    """Seconds the next sandbox step sleeps."""
    if self.dist == "fixed":
      return self.latency_s
    with self._rng_lock:
      return float(self._rng.exponential(self.latency_s))


class _Delayed(gymnasium.Wrapper):
  def __init__(self, env, delay):
    super().__init__(env)
    self._delay = delay

  def step(self, action):
    time.sleep(self._delay())
    return self.env.step(action)
