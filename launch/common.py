"""Shared pieces of the absl entry points."""

from __future__ import annotations

import os
import sys

from absl import flags, logging


CPU_THREADS = flags.DEFINE_integer(
    "cpu_threads", 2, "On a CPU-only host: XLA's intra-op thread pool size (PJRT_NPROC), "
    "fixed so that a run is bit-identical on hosts with any number of cores (XLA:CPU splits "
    "each reduction into one partial sum per thread). 0: one thread per available core. "
    "Ignored where an accelerator plugin is installed.", lower_bound=0)


def pin_cpu_threads() -> None:
  """Applies --cpu_threads before JAX starts; a conflict exits with a usage error."""
  from rlpt.runtime import cpu_only_host, set_cpu_threads
  if not cpu_only_host():
    return
  if not flags.FLAGS["cpu_threads"].present and "PJRT_NPROC" in os.environ:
    return  # the environment's own choice stands unless the flag is given
  try:
    set_cpu_threads(CPU_THREADS.value)
  except (ValueError, RuntimeError) as e:
    from absl import app
    raise app.UsageError(f"--cpu_threads={CPU_THREADS.value}: {e}") from e


def typed_config(cls, config_dict):
  """ConfigDict -> frozen dataclass; a user mistake exits with one clear line."""
  from rlpt.config import ConfigError, from_config_dict
  try:
    return from_config_dict(cls, config_dict)
  except ConfigError as e:
    logging.error("Invalid config: %s", e)
    sys.exit(f"Invalid config: {e}")


def quiet_libraries() -> None:
  """Library INFO chatter (orbax, XLA) hides the progress bar; keep it to warnings
  unless the user asked for a verbosity with --verbosity / -v."""
  # `present`, not `using_default_value`: absl.app assigns the flag while
  # starting, so it never reads as default.
  if not flags.FLAGS["verbosity"].present:
    import logging as py_logging
    logging.set_verbosity(logging.WARNING)
    for name in ("", "jax", "orbax", "absl"):
      py_logging.getLogger(name).setLevel(py_logging.WARNING)
