"""rlpt.device.host_metrics: resident memory against /proc, a run's compiles counted."""

import jax
import numpy as np

from rlpt import device


def test_compiles_are_counted_once_per_new_shape_by_the_pool_running_them():
  pool, other = device.ProgramPool(), device.ProgramPool()
  f = pool.jit(lambda x: x * 3 + 1)
  f(np.ones((7, 3), np.float32))
  after_one = device.host_metrics(pool)["host/compiles"]
  f(np.ones((7, 3), np.float32))  # cached: no compile
  assert device.host_metrics(pool)["host/compiles"] == after_one >= 1
  f(np.ones((9, 3), np.float32))  # a new shape
  assert device.host_metrics(pool)["host/compiles"] == after_one + 1
  assert device.host_metrics(pool)["host/compile_s"] > 0
  assert device.host_metrics(pool)["host/programs"] == 2
  # Eager work counts where the run says it is its own, and nowhere else.
  g = jax.jit(lambda x: x - 5)
  with other.counting():
    g(np.ones((5, 2), np.float32))
  g(np.ones((6, 2), np.float32))  # no pool's
  assert other.compiles == 1 and pool.compiles == after_one + 1
  assert device.host_metrics(other)["host/programs"] == 0


def test_resident_memory_follows_an_allocation():
  base = device.resident_mib()
  with open("/proc/self/smaps_rollup") as f:
    rss = [int(line.split()[1]) / 1024 for line in f if line.startswith("Rss:")][0]
  assert abs(base - rss) < 64  # the same figure, read a moment apart
  block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
  assert device.resident_mib() - base > 48
  del block
