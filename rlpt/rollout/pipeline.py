"""Asynchronous rollout with a bounded, deterministic staleness.

``AsyncRollout`` runs a producer thread that builds the batches ("waves") the
trainer will consume, ahead of it: wave w is consumed by update w and is
sampled with the policy of version ``max(v0, w - 1 - k)`` (version v = the
weights after v updates, v0 the version the run started or resumed at). So
while update w runs, waves w+1..w+k are being generated on the device and
graded by the environments; k = 0 would be the synchronous loop (the trainer
does not use this class then). The version a wave uses does not depend on
thread timing, so an asynchronous run is as reproducible as a synchronous
one.

``BusyClock`` records the intervals in which a jitted program is running (or
the host is blocked on its result) and reports the fraction of a window in
which none was: the accelerator's idle fraction.

Nothing here knows about models; the trainer supplies ``produce(wave,
version)`` and publishes each new version.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class BusyClock:
  """Union of busy intervals; idle fraction of a window (thread-safe)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._intervals: list[tuple[float, float]] = []

  @contextlib.contextmanager
  def busy(self):
    start = time.perf_counter()
    try:
      yield
    finally:
      end = time.perf_counter()
      with self._lock:
        self._intervals.append((start, end))

  def idle_fraction(self, start: float, end: float) -> float:
    """Fraction of [start, end] covered by no busy interval; forgets intervals before start."""
    if end <= start:
      return 0.0
    with self._lock:
      self._intervals = [iv for iv in self._intervals if iv[1] > start]
      spans = sorted((max(a, start), min(b, end)) for a, b in self._intervals if a < end)
    covered, cur_a, cur_b = 0.0, None, None
    for a, b in spans:
      if cur_b is None or a > cur_b:
        if cur_b is not None:
          covered += cur_b - cur_a
        cur_a, cur_b = a, b
      else:
        cur_b = max(cur_b, b)
    if cur_b is not None:
      covered += cur_b - cur_a
    return max(0.0, 1.0 - covered / (end - start))


class Wave(NamedTuple):
  item: Any        # what produce() returned
  version: int     # the policy version it was sampled with
  wait_s: float    # how long the consumer waited for it
  ready: int       # waves finished and waiting when it was taken (queue depth)


class AsyncRollout:
  """Producer thread running ``produce(wave, version)`` up to ``staleness`` waves ahead.

  first_wave: the first wave to produce (the step after the one resumed at);
  its version, and the starting ``latest`` version, is ``first_wave - 1``.
  """

  def __init__(self, produce: Callable[[int, int], Any], staleness: int, first_wave: int = 1):
    if staleness < 1:
      raise ValueError(f"AsyncRollout needs staleness >= 1, got {staleness} (0 is synchronous).")
    self._produce = produce
    self.staleness = staleness
    self._v0 = first_wave - 1
    self._latest = self._v0
    self._next = first_wave
    self._ready: dict[int, tuple[Any, int]] = {}
    self._error: BaseException | None = None
    self._stop = False
    self._cv = threading.Condition()
    self._thread = threading.Thread(target=self._run, name="rlpt-rollout", daemon=True)
    self._thread.start()

  def version_for(self, wave: int) -> int:
    return max(self._v0, wave - 1 - self.staleness)

  def _run(self) -> None:
    try:
      while True:
        wave = self._next
        version = self.version_for(wave)
        with self._cv:
          while not self._stop and self._latest < version:
            self._cv.wait()
          if self._stop:
            return
        item = self._produce(wave, version)
        with self._cv:
          self._ready[wave] = (item, version)
          self._next = wave + 1
          self._cv.notify_all()
    except BaseException as e:  # noqa: BLE001  Re-raised in the consumer.
      with self._cv:
        self._error = e
        self._cv.notify_all()

  def get(self, wave: int) -> Wave:
    """Blocks until ``wave`` is produced; re-raises a producer failure."""
    t = time.perf_counter()
    with self._cv:
      while wave not in self._ready:
        if self._error is not None:
          raise RuntimeError(f"the rollout producer failed on wave {self._next}") from self._error
        if self._stop:
          raise RuntimeError("AsyncRollout is closed")
        self._cv.wait()
      item, version = self._ready.pop(wave)
      depth = len(self._ready)
    return Wave(item, version, time.perf_counter() - t, depth)

  def publish(self, version: int) -> None:
    """The trainer has made policy ``version`` available to the producer."""
    with self._cv:
      self._latest = max(self._latest, version)
      self._cv.notify_all()

  def close(self) -> None:
    with self._cv:
      self._stop = True
      self._cv.notify_all()
    self._thread.join(timeout=600)
