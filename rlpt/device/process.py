"""This process and its XLA backend: CPU devices and threads, the compilation
cache, which process is the primary."""

from __future__ import annotations

import os

import jax

# How long after XLA:CPU's "stuck" warning (20 s) a collective of emulated CPU
# devices may still wait for its last device before XLA ends the process (its
# default: 40 s).
COLLECTIVE_WAIT_S = 600


def set_cpu_devices(n: int) -> None:
  """Gives this process's CPU platform ``n`` XLA devices that each run their
  operations on one thread (data parallel over the cores, as over the chips of
  a mesh) instead of one device that splits every operation across the cores.
  On small CPU hosts this is the faster layout for small models (see
  benchmarks/workload.py); accelerators are unaffected. Call it before JAX
  starts; 1 leaves everything as it is.

  The devices share the host's cores with each other, with a second program
  (an asynchronous rollout's, on another thread) and with the environments'
  processes, so a collective may wait long for its last device. XLA:CPU ends
  the process when that wait passes a minute (a warning at 20 s, the end 40 s
  later); here the end comes 10 minutes after the warning.
  """
  if n < 1:
    raise ValueError(f"CPU devices must be >= 1, got {n}.")
  if n == 1:
    return
  from jax._src import xla_bridge
  if xla_bridge.backends_are_initialized():
    raise RuntimeError(f"{n} CPU devices must be set before JAX starts; it has already "
                       f"started with {jax.device_count()} device(s).")
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" in flags:
    raise ValueError(f"XLA_FLAGS already sets the CPU device count ('{flags}'); set {n} CPU "
                     "devices there or here, not both.")
  os.environ["XLA_FLAGS"] = (f"{flags} --xla_force_host_platform_device_count={n} "
                             "--xla_cpu_multi_thread_eigen=false "
                             f"--xla_cpu_collective_call_terminate_timeout_seconds={COLLECTIVE_WAIT_S}"
                             ).strip()


def set_cpu_threads(n: int) -> None:
  """Sizes XLA:CPU's intra-op thread pool to ``n`` threads (``PJRT_NPROC``)
  whatever the host's core count; 0 leaves XLA's default, one per available
  core. Call it before JAX starts.

  XLA:CPU splits a reduction (a sum over the batch, a loss mean, a bias
  gradient) into one partial sum per thread, so the thread count is part of
  the arithmetic: the same program on 1 and on 2 cores differs in the last
  bits, and 600 steps of pre-training turn those bits into another base. With
  the count fixed, a run is bit-identical on hosts with more or fewer cores
  (tests/launch/test_cpu_threads.py; the README says on which machines).
  """
  if n < 0:
    raise ValueError(f"CPU threads must be >= 0 (0: one per core), got {n}.")
  if n == 0:
    return
  current = os.environ.get("PJRT_NPROC")
  if current not in (None, str(n)):
    raise ValueError(f"PJRT_NPROC is already set to {current!r}; set {n} threads there or "
                     "here, not both.")
  from jax._src import xla_bridge
  if xla_bridge.backends_are_initialized():
    raise RuntimeError(f"{n} CPU threads must be set before JAX starts; it has already started.")
  os.environ["PJRT_NPROC"] = str(n)


def use_compilation_cache(path: str, min_compile_secs: float = 0.1) -> None:
  """Keeps XLA's compiled programs on disk under ``path`` (JAX's persistent
  compilation cache), so a later run, or a later shape seen again, loads a
  program instead of compiling it: the same executable, so the same bits.
  Programs that compile in under ``min_compile_secs`` are not kept. ``path``
  empty: off. Concurrent processes may share it (entries are written
  atomically; the key covers the JAX version, the backend, the devices and
  XLA's flags). Keep one per machine: XLA:CPU compiles for the host's own
  instruction set."""
  if not path:
    return
  os.makedirs(path, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_secs))
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def is_primary() -> bool:
  """Only process 0 writes logs, plots and checkpoints."""
  return jax.process_index() == 0
