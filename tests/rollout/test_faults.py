"""Fault injection on a batch: a sandbox worker killed mid-job, a hung environment,
an environment that raises. The batch completes and every sample is accounted
for: solved after a retry on a fresh, replayed environment, or masked as an
infrastructure failure; never silently scored as a wrong answer."""

import os
import signal
import threading
import time

import pytest

from environments import sandbox
from rlpt.config import EnvConfig
from rlpt.data import Task
from rlpt.rollout import EnvPool

RENAME = "rlpt/terminal-rename-easy-v0"
REVERSE = "rlpt/strings-reverse-easy-v0"


def _demo_batch(pool, domain, n, split="train"):
  eps = pool.start([Task(domain, s, split) for s in range(n)])
  return eps, [ep.info["demonstration"] for ep in eps]


def _accounted(steps):
  # Every sample either solved (the demonstration is correct) or masked.
  return all(s.done and (s.graded.success or s.graded.infra_error) for s in steps)


def test_sandbox_worker_killed_mid_batch(monkeypatch):
  pool = EnvPool([RENAME], EnvConfig(workers=4, retries=3, backoff_s=0.01))
  try:
    eps, demos = _demo_batch(pool, RENAME, 12)
    # Each command takes 0.4 s inside the sandbox, so the kill lands mid-job.
    answers = [f"sleep 0.4; {d}" for d in demos]
    sp = sandbox.default_pool()

    def killer():
      time.sleep(0.2)
      for slot in sp._all:
        if slot.worker is not None:
          try:
            os.killpg(slot.worker.proc.pid, signal.SIGKILL)
          except ProcessLookupError:
            pass
    k = threading.Thread(target=killer)
    k.start()
    steps = pool.step(eps, answers)
    k.join()
    stats = pool.stats()
    assert len(steps) == 12 and _accounted(steps)
    assert stats["env/retries"] >= 1  # the killed jobs were retried ...
    assert all(s.graded.success for s in steps)  # ... and all succeeded on fresh workers
    assert stats["env/masked"] == 0
  finally:
    pool.close()


def test_hung_environment_times_out_and_is_retried_on_a_replayed_env():
  pool = EnvPool([REVERSE], EnvConfig(workers=2, retries=1, job_timeout_s=0.5), max_attempts=2)
  try:
    eps, demos = _demo_batch(pool, REVERSE, 6)
    # Turn 1: every episode fails once (so turn 2 needs the replayed state).
    first = pool.step(eps, ["q"] * 6)
    assert all(not s.done for s in first)
    release = threading.Event()
    eps[2].env.step = lambda action: release.wait(30)
    t = time.perf_counter()
    steps = pool.step(eps, demos)
    assert time.perf_counter() - t < 10
    release.set()
    assert _accounted(steps) and all(s.graded.success for s in steps)
    assert eps[2].turns == 2  # the replayed env went through the failed first attempt
    stats = pool.stats()
    assert stats["env/timeouts"] == 1 and stats["env/retries"] == 1
  finally:
    pool.close()


@pytest.mark.parametrize("retries", [0, 2])
def test_environment_that_raises(retries):
  pool = EnvPool([REVERSE], EnvConfig(workers=2, retries=retries, backoff_s=0.01))
  try:
    eps, demos = _demo_batch(pool, REVERSE, 8)
    for ep in eps[:3]:
      def boom(action):
        raise RuntimeError("verifier crashed")
      ep.env.step = boom
    steps = pool.step(eps, demos)
    assert len(steps) == 8 and _accounted(steps)
    masked = [s.graded.infra_error for s in steps]
    assert masked == ([True] * 3 + [False] * 5 if retries == 0 else [False] * 8)
    assert all(s.graded.reward == 0.0 for s in steps if s.graded.infra_error)
    assert pool.stats()["env/masked"] == (3 if retries == 0 else 0)
  finally:
    pool.close()


def test_environment_seconds_are_recorded_per_episode():
  """Each episode's environment seconds (``Step.env_s``): the signal accounting's compute."""
  pool = EnvPool([REVERSE], EnvConfig(workers=2))
  try:
    eps, demos = _demo_batch(pool, REVERSE, 4)
    step = eps[0].env.step

    def slow(action):
      time.sleep(0.2)
      return step(action)
    eps[0].env.step = slow
    steps = pool.step(eps, demos)
    assert steps[0].env_s >= 0.2 and eps[0].env_s == steps[0].env_s
    assert all(0 < s.env_s < 0.2 for s in steps[1:])
  finally:
    pool.close()


def test_a_reset_that_raises_is_retried_then_named(monkeypatch):
  """A generator's transient failure at reset is retried on a fresh env (the
  task is the same: same seed, same split); one that keeps failing stops the
  batch with the task named."""
  from environments.env import TaskEnv
  reset, failed = TaskEnv.reset, set()

  def flaky(self, *, seed=None, options=None):
    if seed not in failed:  # each task's first reset fails
      failed.add(seed)
      raise SystemError("AST constructor recursion depth mismatch (before=36, after=29)")
    return reset(self, seed=seed, options=options)
  monkeypatch.setattr(TaskEnv, "reset", flaky)
  pool = EnvPool([REVERSE], EnvConfig(workers=2, retries=1, backoff_s=0.0))
  try:
    eps, demos = _demo_batch(pool, REVERSE, 4)
    assert all(s.graded.success for s in pool.step(eps, demos))
    assert pool.stats()["env/reset_retries"] == 4
    monkeypatch.setattr(TaskEnv, "reset", lambda self, **kw: 1 / 0)
    with pytest.raises(RuntimeError, match=r"strings-reverse-easy-v0: reset\(seed=0, split='train'\) "
                                           r"failed 2 times; last: ZeroDivisionError"):
      pool.start([Task(REVERSE, 0, "train")])
  finally:
    pool.close()
