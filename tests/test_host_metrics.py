"""rlpt.device.host_metrics: resident memory against /proc, compiles counted."""

import jax
import numpy as np

from rlpt import device


def test_compiles_are_counted_once_per_new_shape():
  device.count_compiles()
  device.count_compiles()  # idempotent: one listener
  f = jax.jit(lambda x: x * 3 + 1)
  before = device.host_metrics()["host/compiles"]
  f(np.ones((7, 3), np.float32))
  after_one = device.host_metrics()["host/compiles"]
  f(np.ones((7, 3), np.float32))  # cached: no compile
  assert device.host_metrics()["host/compiles"] == after_one
  f(np.ones((9, 3), np.float32))  # a new shape
  assert after_one - before >= 1
  assert device.host_metrics()["host/compiles"] == after_one + 1
  assert device.host_metrics()["host/compile_s"] > 0


def test_resident_memory_follows_an_allocation():
  base = device.resident_mib()
  with open("/proc/self/status") as f:
    vm = [int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:")][0]
  assert abs(base - vm) < 64  # the same figure, read a moment apart
  block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
  assert device.resident_mib() - base > 48
  del block
