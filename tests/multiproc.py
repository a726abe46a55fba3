"""Running a test's worker script as several JAX processes on loopback (gloo CPU collectives)."""

import os
import socket
import subprocess
import sys
from collections.abc import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_env() -> dict:
  """The environment of a worker: CPU only, and XLA_FLAGS with the suite's
  compile flags alone (the worker sets its own devices)."""
  return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": compile_flags()}


def compile_flags() -> str:
  """The XLA flags every process of the suite compiles with (tests/conftest.py)."""
  return os.environ.get("RLPT_TEST_COMPILE_FLAGS", "")


def run_processes(worker: str, args: Callable[[int], list[str]], n: int, timeout: float) -> None:
  """Runs ``worker *args(i) COORDINATOR n i`` for i < n at once; fails naming the
  process that failed and the end of its output."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    coordinator = f"127.0.0.1:{s.getsockname()[1]}"
  procs = [subprocess.Popen([sys.executable, worker, *args(i), coordinator, str(n), str(i)],
                            cwd=ROOT, env=cpu_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True) for i in range(n)]
  try:
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for i, p in enumerate(procs):
    assert p.returncode == 0, f"process {i} failed:\n{logs[i][-4000:]}"
