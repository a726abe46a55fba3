"""rlpt.device.host_metrics: resident memory against /proc, a run's compiles counted."""

import os
import subprocess
import sys

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


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FOLLOW = """
import mmap
import numpy as np
from rlpt.device.telemetry import resident_mib
with open("/proc/self/smaps_rollup") as f:
  rss = [int(line.split()[1]) / 1024 for line in f if line.startswith("Rss:")][0]
base = resident_mib()
assert abs(base - rss) < 64, (base, rss)  # the same figure, read a moment apart
pages = mmap.mmap(-1, 256 * 2**20)  # fresh anonymous pages, not the allocator's
np.frombuffer(pages, np.uint8)[:] = 1  # every page touched
print(resident_mib() - base)
"""


def test_resident_memory_follows_an_allocation():
  # In a fresh process, on pages mapped for the purpose: inside a long test
  # worker, malloc (or an allocator a native library brought in) can serve a
  # large block from memory already resident, and the reading rightly stays put.
  out = subprocess.run([sys.executable, "-c", _FOLLOW], capture_output=True, text=True,
                       check=True, timeout=120, cwd=_ROOT)
  grown = float(out.stdout.split()[-1])
  assert 240 < grown < 320, out.stdout
