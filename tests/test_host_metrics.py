"""rlpt.device.host_metrics: resident memory against /proc, a run's compiles counted."""

import gc

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
  # Earlier tests leave garbage whose collection, set off by any allocation,
  # can hand back tens of MiB between two readings: collect it first and keep
  # the collector off while measuring, and allocate far more than that noise.
  gc.collect()
  gc.disable()
  try:
    base = device.resident_mib()
    with open("/proc/self/smaps_rollup") as f:
      rss = [int(line.split()[1]) / 1024 for line in f if line.startswith("Rss:")][0]
    assert abs(base - rss) < 64  # the same figure, read a moment apart
    block = np.ones(256 * 2**20 // 8)  # 256 MiB, touched
    grown = device.resident_mib() - base
    del block
    assert grown > 192, grown
  finally:
    gc.enable()
