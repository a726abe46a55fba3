"""Drives gymnasium text environments from the trainer, concurrently.

rlpt reaches environments only through ``gymnasium.make`` / ``reset`` /
``step``. A task is regenerated from (domain, seed, split) by ``reset``, so
the G completions of one prompt are G independent episodes that run on any
free environment instances in parallel; the sandboxed environments release
the GIL while their worker runs the candidate.

An `Episode` holds one environment instance from ``start`` (reset) until the
environment ends it (terminated or truncated: a solved task, the attempt or
turn budget spent, an infrastructure failure) or the caller abandons it (its
context is full). Between turns the environment keeps its state, so
multi-attempt repair and tool calls work exactly as a gymnasium user would
drive them.

Jobs run on a `JobScheduler`: domains tagged ``sandbox`` in the registry use
the "sandbox" resource class, every other domain the "cheap" one, each with
its own worker threads; a domain's priority (``priorities``) orders jobs
within a class, ageing prevents starvation, and a hung job times out.

Nothing is silently scored 0: a step that raises, times out or reports an
infrastructure failure (``info["infra_error"]``, the sandbox's
SANDBOX_ERROR) is retried with exponential backoff on a fresh environment,
which is reset and replayed through the episode's earlier actions first
(environments are deterministic in their seed and actions). When the retries
are spent the step is returned with ``infra_error`` set and the trainer
masks the sample.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Sequence

import gymnasium
import numpy as np

from rlpt.config import EnvConfig
from rlpt.data import Task
from rlpt.rollout.domains import register_domain_files
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.rollout.records import Episode, Outcome, Prompt, Step, check_step
from rlpt.rollout.scheduler import JobScheduler, JobTimeout

SANDBOX, CHEAP = "sandbox", "cheap"


def _infra_failure(e: BaseException) -> Outcome:
  return Outcome(0.0, False, "SANDBOX_ERROR", True, {"feedback": f"{type(e).__name__}: {e}"})


class EnvPool(EnvironmentPool):
  """Per-domain pools of environment instances behind a job scheduler, on this host.

  ``cfg``: the run's ``env`` section (worker threads of the cheap and sandbox
  resource classes, priorities, one per domain, retries and their backoff,
  the hung-job timeout, ageing). ``max_attempts`` > 1 gives every episode
  that many graded attempts (failed ones return feedback); ``max_turns``
  overrides the turn budget of tool-using domains (0 keeps each domain's
  own); both go to ``gymnasium.make``, and so does ``cfg.prompt_style`` when
  it is not "bare" (a domain that offers no instruct style raises here,
  naming it). ``files``: domain description files
  to register first. A subclass may wrap a domain's environments by
  overriding ``make_env`` (the benchmarks inject slow environments so).
  """

  def __init__(self, domains: Sequence[str], cfg: EnvConfig = EnvConfig(), *,
               max_attempts: int = 1, max_turns: int = 0, files: Sequence[str] = ()):
    register_domain_files(files)
    from environments import registry

    registered = set(gymnasium.registry)
    for d in domains:
      if d not in registered:
        registry.get(d)  # raises with close matches
    if cfg.priorities and len(cfg.priorities) != len(domains):
      raise ValueError(f"env.priorities has {len(cfg.priorities)} entries for {len(domains)} "
                       f"domains {list(domains)}: give one per domain, or none.")
    self.cfg = cfg
    self._kwargs, self._resource = {}, {}
    for d in domains:
      spec = registry.get(d)
      kw = {"max_attempts": max_attempts} if max_attempts != 1 else {}
      if cfg.prompt_style != "bare":
        if cfg.prompt_style not in spec.prompt_styles:
          raise ValueError(f"env.prompt_style is {cfg.prompt_style!r} but domain '{d}' offers "
                           f"only {spec.prompt_styles}; leave it out or use prompt_style 'bare'.")
        kw["prompt_style"] = cfg.prompt_style
      if max_turns and spec.max_turns is not None:
        kw["max_turns"] = max_turns
      self._kwargs[d] = kw
      self._resource[d] = SANDBOX if "sandbox" in spec.tags else CHEAP
    self._priority = dict(zip(domains, cfg.priorities or [0.0] * len(domains)))
    self._free: dict[str, collections.deque] = {d: collections.deque() for d in domains}
    self._lock = threading.Lock()
    self.scheduler = JobScheduler(
        {CHEAP: cfg.workers, SANDBOX: cfg.sandbox_workers or cfg.workers},
        aging_s=cfg.aging_s, timeout_s=cfg.job_timeout_s)
    self._latency: dict[str, list[float]] = collections.defaultdict(list)
    self._counts = collections.Counter()

  def make_env(self, domain: str):
    """A fresh environment of ``domain`` (``gymnasium.make`` with the pool's options)."""
    return gymnasium.make(domain, disable_env_checker=True, **self._kwargs[domain])

  def resource(self, domain: str) -> str:
    """The resource class ``domain``'s jobs run in: "sandbox" or "cheap"."""
    return self._resource[domain]

  # -- environment instances -------------------------------------------------

  def _acquire(self, domain: str):
    with self._lock:
      if domain not in self._free:
        raise ValueError(f"Domain '{domain}' is not in this pool ({sorted(self._free)}).")
      if self._free[domain]:
        return self._free[domain].pop()
    return self.make_env(domain)

  def _release(self, domain: str, env) -> None:
    with self._lock:
      self._free[domain].append(env)

  def idle(self) -> dict[str, int]:
    """Environments waiting in the pool for their next episode, per domain."""
    with self._lock:
      return {d: len(q) for d, q in self._free.items()}

  # -- jobs ------------------------------------------------------------------

  def _reset_env(self, task: Task):
    """(env, observation, info) of ``task``'s reset. A reset that raises (a
    generator's transient failure) is retried ``retries`` times on a fresh
    env, after the backoff; one that keeps failing raises a RuntimeError
    naming the task (a domain that cannot draw that task is a bug to fix,
    not a sample to score)."""
    for attempt in range(self.cfg.retries + 1):
      env = self._acquire(task.domain) if attempt == 0 else self.make_env(task.domain)
      try:
        obs, info = env.reset(seed=task.seed, options={"split": task.split})
        return env, obs, info
      except Exception as e:  # noqa: BLE001  retried, then reported with the task
        env.close()
        error = e
        if attempt < self.cfg.retries:
          with self._lock:
            self._counts["reset_retries"] += 1
          time.sleep(self.cfg.backoff_s * (2 ** attempt))
    raise RuntimeError(f"{task.domain}: reset(seed={task.seed}, split={task.split!r}) failed "
                       f"{self.cfg.retries + 1} times; last: {type(error).__name__}: {error}") from error

  def _reset(self, task: Task) -> Prompt:
    env, obs, info = self._reset_env(task)
    self._release(task.domain, env)
    return Prompt(task, obs, info)

  def _start(self, task: Task) -> Episode:
    env, obs, info = self._reset_env(task)
    return Episode(task, env, obs, info)

  def _step_job(self, episode: Episode, action: str, replay: bool):
    """Runs in a worker: (fresh env if ``replay``) then one step. Returns the raw
    gymnasium result and the env it ran on; raises on environment errors."""
    t = time.perf_counter()
    env = episode.env
    if replay:
      env = self.make_env(episode.task.domain)
      env.reset(seed=episode.task.seed, options={"split": episode.task.split})
      for earlier in episode.actions:
        env.step(earlier)
    result = env.step(action)
    return result, env, time.perf_counter() - t

  def submit_step(self, episode: Episode, action: str, attempt: int = 0):
    """Schedules one step of ``episode`` (attempt > 0: a retry, on a replayed
    environment after the backoff); a future for ``settle_step``."""
    d = episode.task.domain
    delay = self.cfg.backoff_s * (2 ** (attempt - 1)) if attempt else 0.0
    return self.scheduler.submit(self._step_job, episode, action, attempt > 0,
                                 resource=self._resource[d], priority=self._priority[d],
                                 delay_s=delay)

  def settle_step(self, fut, episode: Episode, action: str, attempt: int) -> Step | None:
    """The step of a finished ``submit_step`` job, or None when it failed and
    was not the last attempt (the caller resubmits it as attempt + 1): an
    infrastructure failure is retried ``retries`` times, then masked."""
    ep, infra, result = episode, False, None
    try:
      result, env, seconds = fut.result()
      infra = bool(result[4].get("infra_error", False))
      if infra:
        ep.env_s += seconds  # a failed attempt's time is spent too
      failure = (_infra_failure(RuntimeError(result[4].get("feedback", "infra error")))
                 if infra else None)
    except JobTimeout as e:
      # The hung instance may still be running: never touch it again.
      ep.env, env, failure = None, None, _infra_failure(e)
    except Exception as e:  # noqa: BLE001  An environment bug must not kill the run.
      env, failure = None, _infra_failure(e)
    if failure is None:
      return self._finish(ep, action, result, env, seconds)
    if attempt < self.cfg.retries:
      with self._lock:
        self._counts["retries"] += 1
      if env is not None and env is not ep.env:
        env.close()
      return None
    if infra and env is not None:
      # The environment itself reported the failure: keep its verdict and info.
      if env is not ep.env and ep.env is not None:
        ep.env.close()
      ep.env = env
      obs, reward, _, _, info = result
      failure = Outcome(ep.reward + float(reward), False, str(info.get("verdict", "")), True, info)
    return self._fail(ep, failure)

  def _finish(self, episode: Episode, action: str, result, env, seconds: float) -> Step:
    obs, reward, terminated, truncated, info = result
    if env is not episode.env:
      if episode.env is not None:
        episode.env.close()
      episode.env = env
    episode.actions.append(action)
    episode.turns += 1
    episode.reward += float(reward)
    episode.done = bool(terminated or truncated)
    episode.env_s += seconds
    with self._lock:
      self._latency[episode.task.domain].append(seconds)
    graded = Outcome(episode.reward, bool(info.get("success", reward >= 1.0)),
                    str(info.get("verdict", "")), bool(info.get("infra_error", False)), info)
    if episode.done:
      self._release(episode.task.domain, episode.env)
      episode.env = None
      obs = ""
    return Step(obs, episode.done, graded, episode.env_s)

  def _fail(self, episode: Episode, graded: Outcome) -> Step:
    """Ends an episode on an infrastructure failure; its env is not reused."""
    env, episode.env, episode.done = episode.env, None, True
    if env is not None:
      try:
        env.close()
      except Exception:  # noqa: BLE001  It is being discarded because it broke.
        pass
    with self._lock:
      self._counts["masked"] += 1
    return Step("", True, graded, episode.env_s)

  # -- public API ------------------------------------------------------------

  def start(self, tasks: Sequence[Task]) -> list[Episode]:
    """Resets one environment per task (concurrently) and holds it for the episode."""
    futures = [self.scheduler.submit(self._start, t, resource=CHEAP,
                                     priority=self._priority.get(t.domain, 0.0)) for t in tasks]
    return [f.result() for f in futures]

  def step(self, episodes: Sequence[Episode], actions: Sequence[str]) -> list[Step]:
    """Steps every episode with its action, concurrently; ended episodes free their env.

    Infrastructure failures are retried (fresh env, replay, backoff) up to
    ``retries`` times, then returned masked (``graded.infra_error``).
    """
    pending = self.submit(episodes, actions)
    out: list[Step | None] = [None] * len(episodes)
    while pending:
      for i, step in pending.wait():
        out[i] = step
    return out  # type: ignore[return-value]

  def submit(self, episodes: Sequence[Episode], actions: Sequence[str]) -> PendingSteps:
    """Starts stepping every episode with its action; the steps come back, in
    the order they finish, from the returned `PendingSteps` (same retries and
    masking as ``step``). Lets a caller act on the first results while slower
    environments are still running."""
    return PendingSteps(self, episodes, actions)

  def abandon(self, episodes: Sequence[Episode]) -> None:
    """Ends episodes the caller stops early; their environments return to the pool."""
    for ep in episodes:
      if not ep.done:
        ep.done = True
        self._release(ep.task.domain, ep.env)
        ep.env = None

  def reset(self, tasks: Sequence[Task]) -> list[Prompt]:
    """Prompts (observation and reset info) of ``tasks``, without holding environments."""
    futures = [self.scheduler.submit(self._reset, t, resource=CHEAP) for t in tasks]
    return [f.result() for f in futures]

  def stats(self) -> dict[str, float]:
    """Metrics since the last call: per-domain step latency p50/p99 (seconds),
    retries, masked steps, hung-job timeouts and the deepest job queue."""
    with self._lock:
      latency, self._latency = self._latency, collections.defaultdict(list)
      counts, self._counts = self._counts, collections.Counter()
    out = {}
    for d, xs in sorted(latency.items()):
      out[f"env_latency_p50/{d}"] = float(np.percentile(xs, 50))
      out[f"env_latency_p99/{d}"] = float(np.percentile(xs, 99))
    sched = self.scheduler.reset_stats()
    out["env/retries"] = float(counts["retries"])
    out["env/reset_retries"] = float(counts["reset_retries"])
    out["env/masked"] = float(counts["masked"])
    out["env/timeouts"] = float(sched["timeouts"])
    out["env/queue_depth_max"] = float(sched["max_depth"])
    return out

  def close(self) -> None:
    self.scheduler.close()
    with self._lock:
      for envs in self._free.values():
        while envs:
          envs.pop().close()


class PendingSteps:
  """Steps of a batch of episodes in flight (from `EnvPool.submit`).

  ``wait()`` returns the steps finished so far as (index into the submitted
  episodes, in submission order over every ``add``, Step) pairs, blocking until there is at least one; a failed step
  is resubmitted (retries with backoff, on a replayed environment) and only
  returned once it succeeds or its retries are spent (then masked).
  ``len()`` is the number of steps not yet returned.
  """

  def __init__(self, pool: EnvPool, episodes: Sequence[Episode], actions: Sequence[str]):
    self._pool = pool
    self._episodes: list[Episode] = []
    self._actions: list[str] = []
    self._attempt: list[int] = []
    self._pending: dict = {}
    self.add(episodes, actions)

  def add(self, episodes: Sequence[Episode], actions: Sequence[str]) -> None:
    """Submits more steps; their indices continue after the earlier ones'."""
    check_step(episodes, actions)
    for ep, a in zip(episodes, actions):
      i = len(self._episodes)
      self._episodes.append(ep)
      self._actions.append(a)
      self._attempt.append(0)
      self._pending[self._pool.submit_step(ep, a)] = i

  def __len__(self) -> int:
    return len(self._pending)

  def wait(self, timeout: float | None = None) -> list[tuple[int, Step]]:
    """Finished steps; blocks until at least one (or ``timeout`` seconds: then maybe none)."""
    out: list[tuple[int, Step]] = []
    deadline = None if timeout is None else time.perf_counter() + timeout
    while self._pending and not out:
      left = None if deadline is None else max(0.0, deadline - time.perf_counter())
      done, _ = concurrent.futures.wait(self._pending, timeout=left,
                                        return_when=concurrent.futures.FIRST_COMPLETED)
      for fut in done:
        i = self._pending.pop(fut)
        step = self._pool.settle_step(fut, self._episodes[i], self._actions[i], self._attempt[i])
        if step is None:  # failed, to be retried
          self._attempt[i] += 1
          self._pending[self._pool.submit_step(self._episodes[i], self._actions[i],
                                               self._attempt[i])] = i
        else:
          out.append((i, step))
      if deadline is not None and time.perf_counter() >= deadline:
        break
    return out
