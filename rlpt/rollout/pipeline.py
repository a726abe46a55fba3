"""Asynchronous rollout with a bounded, deterministic staleness.

``AsyncRollout`` runs a producer thread that builds the batches ("waves") the
trainer will consume, ahead of it: wave w is consumed by update w and is
sampled with the policy of version ``max(v0, w - 1 - k)`` (version v = the
weights after v updates, v0 the version the run started or resumed at). So
while update w runs, waves w+1..w+k are being generated on the device and
graded by the environments; k = 0 would be the synchronous loop
(`rlpt.rollout.source.RolloutSource`, which needs no threads). The version a
wave uses does not depend on thread timing, so an asynchronous run is as
reproducible as a synchronous one.

Nothing here knows about models; `rlpt.rollout.async_source.AsyncRolloutSource`
supplies ``prepare(wave, version)`` and ``execute(wave, version, prepared)``
(see `AsyncRollout`) and publishes each new version.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class Wave(NamedTuple):
  item: Any        # what execute() returned
  version: int     # the policy version it was sampled with
  wait_s: float    # how long the consumer waited for it
  ready: int       # waves finished and waiting when it was taken (queue depth)


class AsyncRollout:
  """Producer threads building waves up to ``staleness`` ahead of the consumer.

  Each wave is made in two parts: ``prepare(wave, version)`` runs strictly in
  wave order (it draws the wave's tasks, so the task stream and curriculum
  advance exactly as in a synchronous run), then ``execute(wave, version,
  prepared)`` (generation and grading) runs concurrently with other waves'.
  ``staleness`` threads keep up to that many waves in flight, so one wave's
  environments overlap another's generation and the consumer's update.

  first_wave: the first wave to produce (the step after the one resumed at);
  its version, and the starting ``latest`` version, is ``first_wave - 1``.
  ``execute`` may call ``version_for(wave, k)`` and ``wait_version`` to sample
  parts of a wave at a smaller staleness k.
  """

  def __init__(self, prepare: Callable[[int, int], Any], execute: Callable[[int, int, Any], Any],
               staleness: int, first_wave: int = 1, start: bool = True):
    if staleness < 1:
      raise ValueError(f"AsyncRollout needs staleness >= 1, got {staleness} (0 is synchronous).")
    self._prepare, self._execute = prepare, execute
    self.staleness = staleness
    self._v0 = first_wave - 1
    self._latest = self._v0
    self._next = first_wave        # next wave to claim
    self._prepared = first_wave - 1  # last wave whose prepare() ran
    self._ready: dict[int, tuple[Any, int]] = {}
    self._error: tuple[int, BaseException] | None = None
    self._stop = False
    self._cv = threading.Condition()
    self._threads = [threading.Thread(target=self._run, name=f"rlpt-rollout-{i}", daemon=True)
                     for i in range(staleness)]
    if start:
      self.start()

  def start(self) -> None:
    """Starts the producer threads (``start=False`` defers it, e.g. until the
    caller holds a reference that ``execute`` uses)."""
    for t in self._threads:
      t.start()

  def version_for(self, wave: int, staleness: int | None = None) -> int:
    """The policy version wave ``wave`` samples with, at ``staleness`` (default:
    the bound; a per-domain part of a wave may use a smaller one)."""
    k = self.staleness if staleness is None else staleness
    return max(self._v0, wave - 1 - k)

  def wait_version(self, version: int) -> None:
    """Blocks a producer until ``version`` is published (or the pipeline closes)."""
    with self._cv:
      while not self._stop and self._latest < version:
        self._cv.wait()
      if self._stop:
        raise RuntimeError("AsyncRollout is closed")

  def _run(self) -> None:
    wave = None
    try:
      while True:
        with self._cv:
          wave = self._next
          self._next += 1
          version = self.version_for(wave)
          while not self._stop and (self._latest < version or self._prepared != wave - 1):
            self._cv.wait()
          if self._stop:
            return
        try:
          prepared = self._prepare(wave, version)
        finally:
          with self._cv:
            self._prepared = wave
            self._cv.notify_all()
        item = self._execute(wave, version, prepared)
        with self._cv:
          self._ready[wave] = (item, version)
          self._cv.notify_all()
    except BaseException as e:  # noqa: BLE001  Re-raised in the consumer.
      with self._cv:
        self._error = (wave, e)
        self._cv.notify_all()

  def get(self, wave: int) -> Wave:
    """Blocks until ``wave`` is produced; re-raises a producer failure."""
    t = time.perf_counter()
    with self._cv:
      while wave not in self._ready:
        if self._error is not None:
          raise RuntimeError(f"the rollout producer failed on wave {self._error[0]}") \
              from self._error[1]
        if self._stop:
          raise RuntimeError("AsyncRollout is closed")
        self._cv.wait()
      item, version = self._ready.pop(wave)
      depth = len(self._ready)
    return Wave(item, version, time.perf_counter() - t, depth)

  def publish(self, version: int) -> None:
    """Policy ``version`` is available to the producers (the loop's update is done)."""
    with self._cv:
      self._latest = max(self._latest, version)
      self._cv.notify_all()

  def close(self) -> None:
    with self._cv:
      self._stop = True
      self._cv.notify_all()
    for t in self._threads:
      t.join(timeout=600)
