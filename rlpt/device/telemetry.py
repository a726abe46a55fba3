"""What the host and the accelerator are doing: the busy intervals of a run's
programs (`BusyClock`, the accelerator's idle fraction), resident memory, a
run's XLA compiles and programs kept, whether the run is CPU-only."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from rlpt.device.programs import ProgramPool


class BusyClock:
  """The intervals in which a run's jitted program is running (or the host is
  blocked on its result), and the fraction of a window in which none was: the
  accelerator's idle fraction. Thread-safe (an asynchronous producer samples
  while the update runs)."""

  def __init__(self):
    self._lock = threading.Lock()
    self._intervals: list[tuple[float, float]] = []

  @contextlib.contextmanager
  def busy(self):
    start = time.perf_counter()
    try:
      yield
    finally:
      self.record(start, time.perf_counter())

  def record(self, start: float, end: float) -> None:
    """Adds the busy interval [start, end] (``time.perf_counter`` seconds)."""
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


def resident_mib() -> float:
  """This process's resident memory in MiB.

  /proc/self/smaps_rollup's Rss walks the page tables, so it is exact (about 2 ms
  for a JAX process). /proc/self/status's VmRSS is not: newer kernels keep it in
  per-CPU counters that lag by up to a few hundred MiB on hosts with many CPUs.
  Where there is no /proc, the peak so far from getrusage."""
  for path, key in (("/proc/self/smaps_rollup", "Rss:"), ("/proc/self/status", "VmRSS:")):
    try:
      with open(path) as f:
        for line in f:
          if line.startswith(key):
            return int(line.split()[1]) / 1024
    except OSError:
      continue
  import resource  # POSIX only, hence here
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
  return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def host_metrics(programs: ProgramPool) -> dict[str, float]:
  """The host's figures a long run watches: resident memory, the run's XLA
  compiles so far (a count still rising late in a run means new shapes), the
  compiled programs it keeps (``programs``) and how many it has dropped."""
  return {"host/rss_mib": resident_mib(), "host/compiles": float(programs.compiles),
          "host/compile_s": programs.compile_s, "host/programs": float(len(programs)),
          "host/program_evictions": float(programs.evictions)}


def cpu_only_host() -> bool:
  """Whether JAX will run on the CPU here: JAX_PLATFORMS says only ``cpu``, or
  no accelerator plugin (CUDA / ROCm entry points, libtpu) is installed."""
  import importlib.metadata
  import importlib.util
  platforms = {p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()}
  if platforms:
    return platforms == {"cpu"}
  return (not list(importlib.metadata.entry_points(group="jax_plugins"))
          and importlib.util.find_spec("libtpu") is None)
