"""Host-side job scheduling for environment work: priorities, resource classes, hangs.

Environment jobs (a reset, a step) are callables run by worker threads. Each
job has a *resource class* with its own worker threads and concurrency limit
(CPU-heavy sandbox jobs and cheap verifiers do not crowd each other out) and
a *priority*. Within a class the next job is the one with the highest
priority after ageing: a job's effective priority grows by 1 every
``aging_s`` seconds it waits, so low-priority work never starves. Because
every waiting job ages at the same rate, the order is fixed at submission
(``priority - submit_time / aging_s``) and a heap serves it.

A watchdog fails any job that runs longer than ``timeout_s`` with
``JobTimeout`` and starts a replacement thread for its class; the hung
thread's eventual result is dropped. Jobs may carry a not-before time
(``delay_s``), which the retry logic of ``rlpt.rollout.envs`` uses for
backoff. Nothing here knows about JAX or about environments.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any


class JobTimeout(Exception):
  """A job ran past the scheduler's per-job timeout (a hung worker)."""


class _Job:
  __slots__ = ("fn", "args", "future", "not_before", "started", "thread")

  def __init__(self, fn, args, not_before: float):
    self.fn, self.args = fn, args
    self.future: concurrent.futures.Future = concurrent.futures.Future()
    self.not_before = not_before
    self.started = 0.0
    self.thread: threading.Thread | None = None


class JobScheduler:
  """Worker threads per resource class serving a priority queue with ageing.

  limits: {resource class: number of worker threads}.
  """

  def __init__(self, limits: Mapping[str, int], aging_s: float = 10.0,
               timeout_s: float = 120.0, name: str = "rlpt-env"):
    if not limits or any(n < 1 for n in limits.values()):
      raise ValueError(f"every resource class needs at least one worker, got {dict(limits)}")
    if aging_s <= 0 or timeout_s <= 0:
      raise ValueError(f"aging_s and timeout_s must be > 0, got {aging_s}, {timeout_s}")
    self.limits = dict(limits)
    self.aging_s, self.timeout_s, self.name = aging_s, timeout_s, name
    self._cv = threading.Condition()
    self._queues: dict[str, list] = {c: [] for c in limits}
    self._running: dict[str, set[_Job]] = {c: set() for c in limits}
    self._threads: dict[str, int] = {c: 0 for c in limits}
    self._seq = itertools.count()
    self._closed = False
    self.timeouts = 0
    self.max_depth = 0
    for c, n in limits.items():
      for _ in range(n):
        self._spawn(c)
    self._watchdog = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)
    self._watchdog.start()

  def submit(self, fn: Callable[..., Any], *args, resource: str, priority: float = 0.0,
             delay_s: float = 0.0) -> concurrent.futures.Future:
    """Queues ``fn(*args)``; returns its Future. Higher ``priority`` runs first."""
    if resource not in self._queues:
      raise ValueError(f"unknown resource class {resource!r}; this scheduler has "
                       f"{sorted(self._queues)}")
    now = time.monotonic()
    job = _Job(fn, args, now + delay_s)
    key = -(priority - now / self.aging_s)
    with self._cv:
      if self._closed:
        raise RuntimeError("scheduler is closed")
      heapq.heappush(self._queues[resource], (key, next(self._seq), job))
      self.max_depth = max(self.max_depth, self.depth())
      self._cv.notify_all()
    return job.future

  def depth(self) -> int:
    """Jobs waiting (not yet running), all classes."""
    return sum(len(q) for q in self._queues.values())

  def reset_stats(self) -> dict:
    with self._cv:
      out = {"max_depth": self.max_depth, "timeouts": self.timeouts}
      self.max_depth, self.timeouts = self.depth(), 0
    return out

  def _spawn(self, resource: str) -> None:
    self._threads[resource] += 1
    threading.Thread(target=self._work, args=(resource,), daemon=True,
                     name=f"{self.name}-{resource}").start()

  def _next(self, resource: str) -> _Job | None:
    """Blocks for this class's next runnable job; None when the thread should exit."""
    with self._cv:
      while True:
        if self._closed or self._threads[resource] > self.limits[resource]:
          self._threads[resource] -= 1
          return None
        q = self._queues[resource]
        now = time.monotonic()
        # The best job that may start now (backoff delays hold some back).
        job = None
        if q and q[0][2].not_before <= now:
          job = heapq.heappop(q)[2]
        else:
          ready = [i for i, (_, _, j) in enumerate(q) if j.not_before <= now]
          if ready:
            i = min(ready, key=lambda i: q[i][:2])
            job = q[i][2]
            q[i] = q[-1]
            q.pop()
            heapq.heapify(q)
        if job is not None:
          if job.future.set_running_or_notify_cancel():
            job.started, job.thread = now, threading.current_thread()
            self._running[resource].add(job)
            return job
          continue
        wait = min((j.not_before for _, _, j in q), default=now + 1.0) - now
        self._cv.wait(timeout=max(wait, 1e-3))

  def _work(self, resource: str) -> None:
    while (job := self._next(resource)) is not None:
      try:
        result, error = job.fn(*job.args), None
      except BaseException as e:  # noqa: BLE001  Delivered to the caller through the Future.
        result, error = None, e
      with self._cv:
        self._running[resource].discard(job)
        if job.future.done():
          # Timed out meanwhile: the watchdog answered and replaced this
          # thread, which now leaves.
          return
      if error is None:
        job.future.set_result(result)
      else:
        job.future.set_exception(error)

  def _watch(self) -> None:
    period = min(1.0, self.timeout_s / 4)
    while True:
      time.sleep(period)
      with self._cv:
        if self._closed:
          return
        now = time.monotonic()
        for resource, running in self._running.items():
          for job in list(running):
            if now - job.started > self.timeout_s and not job.future.done():
              running.discard(job)
              self.timeouts += 1
              job.future.set_exception(JobTimeout(
                  f"job ran {now - job.started:.1f}s, past the {self.timeout_s:g}s timeout"))
              # The hung thread stays busy: replace it so the class keeps its capacity.
              self._threads[resource] -= 1
              self._spawn(resource)
        self._cv.notify_all()

  def close(self) -> None:
    with self._cv:
      self._closed = True
      for q in self._queues.values():
        for _, _, job in q:
          job.future.cancel()
        q.clear()
      self._cv.notify_all()
