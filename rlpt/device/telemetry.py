"""What the host is doing: resident memory, XLA compiles so far (counted once
``count_compiles`` runs), programs kept, whether the run is CPU-only."""

from __future__ import annotations

import os
import sys

import jax

from rlpt.device.programs import PROGRAMS


class _Compiles:
  """XLA backend compiles of this process: count and seconds (a jax.monitoring
  listener, registered once by ``count_compiles``)."""

  count = 0
  seconds = 0.0
  listening = False

  @classmethod
  def on_event(cls, event: str, duration: float, **_) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
      cls.count += 1
      cls.seconds += duration


def count_compiles() -> None:
  """Starts counting this process's XLA compiles (idempotent); see ``host_metrics``."""
  if not _Compiles.listening:
    jax.monitoring.register_event_duration_secs_listener(_Compiles.on_event)
    _Compiles.listening = True


def resident_mib() -> float:
  """This process's resident memory in MiB (/proc/self/status VmRSS; where there
  is no /proc, the peak so far from getrusage)."""
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  import resource  # POSIX only, hence here
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KiB elsewhere
  return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def host_metrics() -> dict[str, float]:
  """The host's figures a long run watches: resident memory, the XLA compiles
  so far (a count still rising late in a run means new shapes), the compiled
  programs kept (``PROGRAMS``) and how many it has dropped."""
  return {"host/rss_mib": resident_mib(), "host/compiles": float(_Compiles.count),
          "host/compile_s": _Compiles.seconds, "host/programs": float(len(PROGRAMS)),
          "host/program_evictions": float(PROGRAMS.evictions)}


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
