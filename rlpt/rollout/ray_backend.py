"""Environment workers beyond one machine: the EnvPool interface on Ray actors.

Each actor (a Ray actor of `_ActorBody`) holds a local `EnvPool` (its own scheduler,
resource classes, retries and hang detection run inside the actor's
process, on whatever node Ray placed it). `RayEnvPool` spreads a batch's
episodes over the actors, least-loaded first, keeps each episode on its actor
(environments are stateful between turns) and talks to all actors in
parallel. A dead actor (node lost, process killed) is replaced and its
running episodes are rebuilt on live actors by resetting them and replaying
their accepted actions, so a batch survives losing a worker machine.

Actors import ``environments`` and ``rlpt``: on a local cluster the driver's
repository root is put on their PYTHONPATH; on a real cluster, install the
project on every node (or start Ray with a matching ``runtime_env``).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import warnings
from collections.abc import Sequence

from rlpt.config import EnvConfig
from rlpt.data import Task
from rlpt.rollout.envs import EnvPool
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.rollout.records import Outcome, Prompt, Step, check_step

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_ray(address: str = "", actors: int = 2) -> bool:
  """Starts Ray (joins ``address``, else a local cluster of max(2, actors) CPUs)
  unless it is running; returns whether it started it (and so owns it).

  Call it before JAX starts its threads where you can (``launch.train`` does):
  Ray launches its node processes with fork + exec, which JAX warns about once
  its threads exist. Here the child only execs a new program, so that warning
  does not apply, and it is silenced for this call alone. A local cluster keeps
  Ray's default, token authentication, without Ray's notice that it chose it."""
  import ray
  if ray.is_initialized():
    return False
  path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
  kwargs = {"runtime_env": {"env_vars": {"PYTHONPATH": path}},
            "include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
  auth_log = logging.getLogger("ray._private.authentication.authentication_token_setup")
  auth_log.addFilter(_default_auth_notice)
  try:
    with warnings.catch_warnings():
      warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
      if address:
        ray.init(address=address, **kwargs)
      else:
        ray.init(num_cpus=max(2, actors), **kwargs)
  finally:
    auth_log.removeFilter(_default_auth_notice)
  return True


def _default_auth_notice(record: logging.LogRecord) -> bool:
  """Drops Ray's notice that it enabled token authentication by default for a
  new local cluster: that default is what rlpt wants (every other Ray warning,
  the one for a cluster without authentication included, still shows)."""
  return not record.getMessage().startswith("Token authentication is enabled for this Ray cluster")


class _ActorBody:
  """What runs inside each Ray actor: a local EnvPool and its live episodes."""

  def __init__(self, domains, cfg, pool_kwargs):
    self.pool = EnvPool(domains, cfg, **pool_kwargs)
    self.episodes = {}
    self._ids = itertools.count()

  def start(self, tasks, replays=None):
    """Starts episodes (replaying ``replays[i]``, a list of earlier actions, if given)."""
    eps = self.pool.start(tasks)
    out = []
    for i, ep in enumerate(eps):
      for action in (replays[i] if replays else []):
        self.pool.step([ep], [action])
      eid = next(self._ids)
      self.episodes[eid] = ep
      out.append((eid, ep.prompt, ep.info))
    return out

  def step(self, ids, actions):
    eps = [self.episodes[i] for i in ids]
    steps = self.pool.step(eps, actions)
    for i, s in zip(ids, steps):
      if s.done:
        del self.episodes[i]
    return steps

  def abandon(self, ids):
    self.pool.abandon([self.episodes.pop(i) for i in ids if i in self.episodes])

  def reset(self, tasks):
    return self.pool.reset(tasks)

  def stats(self):
    return self.pool.stats()

  def ping(self):
    return os.getpid()

  def close(self):
    self.pool.close()


class RemoteEpisode:
  """The driver's view of an episode living on an actor (same fields as `Episode`)."""

  __slots__ = ("task", "prompt", "info", "done", "reward", "turns", "actions", "actor", "eid",
               "env_s", "env_base")

  def __init__(self, task: Task, prompt: str, info: dict, actor: int, eid: int):
    self.task, self.prompt, self.info = task, prompt, info
    self.actor, self.eid = actor, eid
    self.done = False
    self.reward = 0.0
    self.turns = 0
    self.actions: list[str] = []
    # Seconds its environment steps ran: on earlier (lost) actors, and in all.
    self.env_base = self.env_s = 0.0


class RayEnvPool(EnvironmentPool):
  """The `EnvironmentPool` interface on Ray actors.

  ``cfg``: the run's ``env`` section: ``ray_address``, a Ray cluster to join
  ("" starts a local one on this machine), ``ray_actors`` Ray actors
  (`_ActorBody`), each an `EnvPool` of that section (``workers`` cheap-class
  and ``sandbox_workers`` sandbox-class threads). ``max_attempts``,
  ``max_turns``, ``files``: as `EnvPool`.
  """

  def __init__(self, domains: Sequence[str], cfg: EnvConfig = EnvConfig(), *,
               max_attempts: int = 1, max_turns: int = 0, files: Sequence[str] = ()):
    import ray

    pool_kwargs = dict(max_attempts=max_attempts, max_turns=max_turns, files=tuple(files))
    # Fail here, with the pool's own error, on unknown domains or bad options.
    EnvPool(domains, dataclasses.replace(cfg, workers=1), **pool_kwargs).close()
    self._ray = ray
    self._owns_ray = start_ray(cfg.ray_address, cfg.ray_actors)
    self._domains, self._cfg, self._pool_kwargs = list(domains), cfg, pool_kwargs
    actors = cfg.ray_actors
    self._actor_cls = ray.remote(num_cpus=0, max_concurrency=4)(_ActorBody)
    self.actors = [self._new_actor() for _ in range(actors)]
    ray.get([a.ping.remote() for a in self.actors])
    self._load = [0] * actors
    self._counts = {"actor_restarts": 0, "rebuilt_episodes": 0}

  def _new_actor(self):
    return self._actor_cls.remote(self._domains, self._cfg, self._pool_kwargs)

  def _replace(self, i: int) -> None:
    try:
      self._ray.kill(self.actors[i])
    except Exception:  # noqa: BLE001  Already gone.
      pass
    self.actors[i] = self._new_actor()
    self._ray.get(self.actors[i].ping.remote())
    self._load[i] = 0
    self._counts["actor_restarts"] += 1

  def _place(self, n: int) -> list[int]:
    """Actor index for each of n new episodes, filling the least-loaded first."""
    out = []
    for _ in range(n):
      i = min(range(len(self.actors)), key=lambda j: self._load[j])
      self._load[i] += 1
      out.append(i)
    return out

  def _start_on(self, placement: list[int], tasks: Sequence[Task], replays=None):
    """Starts tasks on their actors in parallel; returns {position: (actor, eid, prompt, info)}."""
    by_actor: dict[int, list[int]] = {}
    for pos, a in enumerate(placement):
      by_actor.setdefault(a, []).append(pos)
    refs = {a: self.actors[a].start.remote([tasks[p] for p in ps],
                                           [replays[p] for p in ps] if replays else None)
            for a, ps in by_actor.items()}
    out = {}
    for a, ref in refs.items():
      for p, (eid, prompt, info) in zip(by_actor[a], self._ray.get(ref)):
        out[p] = (a, eid, prompt, info)
    return out

  def start(self, tasks: Sequence[Task]) -> list[RemoteEpisode]:
    placement = self._place(len(tasks))
    started = self._start_on(placement, tasks)
    return [RemoteEpisode(tasks[p], started[p][2], started[p][3], started[p][0], started[p][1])
            for p in range(len(tasks))]

  def step(self, episodes: Sequence[RemoteEpisode], actions: Sequence[str]) -> list[Step]:
    check_step(episodes, actions)
    out: list[Step | None] = [None] * len(episodes)
    todo = list(range(len(episodes)))
    for _ in range(3):
      by_actor: dict[int, list[int]] = {}
      for k in todo:
        by_actor.setdefault(episodes[k].actor, []).append(k)
      refs = {a: self.actors[a].step.remote([episodes[k].eid for k in ks],
                                            [actions[k] for k in ks])
              for a, ks in by_actor.items()}
      lost = []
      for a, ref in refs.items():
        try:
          steps = self._ray.get(ref)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError):
          self._replace(a)
          lost.extend(by_actor[a])
          continue
        for k, s in zip(by_actor[a], steps):
          out[k] = self._record(episodes[k], actions[k], s)
      if not lost:
        break
      # Rebuild the lost episodes on live actors: reset and replay, then step again.
      placement = self._place(len(lost))
      rebuilt = self._start_on(placement, [episodes[k].task for k in lost],
                               [episodes[k].actions for k in lost])
      for j, k in enumerate(lost):
        episodes[k].actor, episodes[k].eid = rebuilt[j][0], rebuilt[j][1]
        episodes[k].env_base = episodes[k].env_s  # the new actor's episode counts afresh
      self._counts["rebuilt_episodes"] += len(lost)
      todo = lost
    for k in todo:
      if out[k] is None:  # actors kept dying: account for the sample as masked
        episodes[k].done = True
        self._load[episodes[k].actor] -= 1
        out[k] = Step("", True, Outcome(episodes[k].reward, False, "SANDBOX_ERROR", True,
                                       {"feedback": "environment actor lost three times"}))
    return out  # type: ignore[return-value]

  def submit(self, episodes: Sequence[RemoteEpisode], actions: Sequence[str]) -> CompletedSteps:
    """``EnvironmentPool.submit``; a Ray batch is stepped as a whole (one
    call per actor), so each submitted batch's steps come back together."""
    return CompletedSteps(self, episodes, actions)

  def _record(self, ep: RemoteEpisode, action: str, s: Step) -> Step:
    if not s.graded.infra_error or not s.done:
      ep.actions.append(action)
    ep.turns += 1
    ep.reward = s.graded.reward
    ep.env_s = ep.env_base + s.env_s
    if s.done:
      ep.done = True
      self._load[ep.actor] -= 1
    return s

  def abandon(self, episodes: Sequence[RemoteEpisode]) -> None:
    by_actor: dict[int, list[int]] = {}
    for ep in episodes:
      if not ep.done:
        ep.done = True
        self._load[ep.actor] -= 1
        by_actor.setdefault(ep.actor, []).append(ep.eid)
    self._ray.get([self.actors[a].abandon.remote(ids) for a, ids in by_actor.items()])

  def reset(self, tasks: Sequence[Task]) -> list[Prompt]:
    n = len(self.actors)
    chunks = [list(range(i, len(tasks), n)) for i in range(n)]
    refs = [self.actors[i].reset.remote([tasks[k] for k in ks]) for i, ks in enumerate(chunks)]
    out: list[Prompt | None] = [None] * len(tasks)
    for ks, ref in zip(chunks, refs):
      for k, p in zip(ks, self._ray.get(ref)):
        out[k] = p
    return out  # type: ignore[return-value]

  def stats(self) -> dict[str, float]:
    """The actors' metrics merged (latency percentiles: the worst actor's), plus restarts."""
    merged: dict[str, float] = {}
    for ref in [a.stats.remote() for a in self.actors]:
      try:
        st = self._ray.get(ref)
      except (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError):
        continue  # died since its last step: its counters died with it; the next step rebuilds
      for k, v in st.items():
        merged[k] = max(merged.get(k, v), v) if k.startswith(("env_latency", "env/queue")) \
            else merged.get(k, 0.0) + v
    merged["env/actor_restarts"] = float(self._counts["actor_restarts"])
    merged["env/rebuilt_episodes"] = float(self._counts["rebuilt_episodes"])
    self._counts = {"actor_restarts": 0, "rebuilt_episodes": 0}
    return merged

  def close(self) -> None:
    try:
      self._ray.get([a.close.remote() for a in self.actors], timeout=60)
    except Exception:  # noqa: BLE001  Closing a pool with dead actors must not raise.
      pass
    for a in self.actors:
      self._ray.kill(a)
    if self._owns_ray:
      self._ray.shutdown()


class CompletedSteps:
  """`PendingSteps` for pools that step a batch as a whole: ``add`` steps it
  at once; ``wait`` returns every step not yet returned."""

  def __init__(self, pool, episodes, actions):
    self._pool, self._n, self._done = pool, 0, []
    self.add(episodes, actions)

  def add(self, episodes, actions) -> None:
    steps = self._pool.step(episodes, actions)
    self._done.extend((self._n + j, s) for j, s in enumerate(steps))
    self._n += len(steps)

  def __len__(self) -> int:
    return len(self._done)

  def wait(self, timeout: float | None = None) -> list:
    out, self._done = self._done, []
    return out
