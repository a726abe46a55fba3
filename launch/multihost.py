"""Starts JAX's multi-process runtime so every process sees the global mesh.

Every process runs the same program (single controller semantics: the same
seeds give every process the same rollouts), and only process 0 writes logs
and checkpoints. Where the coordinator, process count and id come from, in
order:

1. the flags ``--coordinator_address --num_processes --process_id``
   (launch/scripts/local.sh sets them for N processes on one machine);
2. ``RLPT_COORDINATOR_ADDRESS``, ``RLPT_NUM_PROCESSES``, ``RLPT_PROCESS_ID``;
3. the cluster's own environment, read by ``jax.distributed.initialize()``:
   SLURM (``SLURM_JOB_ID`` with ``SLURM_NTASKS`` > 1; launch/scripts/slurm.sbatch)
   and Cloud TPU pods (launch/scripts/tpu_pod.sh);
4. otherwise one process, and nothing is initialized.
"""

from __future__ import annotations

import os

from absl import flags

_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None, "host:port of process 0's coordinator (multi-process runs).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes in the run.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0..num_processes-1.")
_CPU_COLLECTIVES = flags.DEFINE_enum(
    "cpu_collectives", "gloo", ["gloo", "mpi", "none"],
    "Cross-process collectives of the CPU backend (CPU-only runs and tests).")


def _env_int(environ, name: str) -> int | None:
  v = environ.get(name)
  if v is None:
    return None
  try:
    return int(v)
  except ValueError:
    raise ValueError(f"${name}={v!r} is not an integer.") from None


def resolve(coordinator_address: str | None = None, num_processes: int | None = None,
            process_id: int | None = None, environ=os.environ) -> dict | None:
  """The arguments for jax.distributed.initialize, or None for a single process.

  Returns ``{}`` when a SLURM job or TPU pod should be auto-detected by JAX.
  Raises a ValueError naming the value when the settings are incomplete or
  inconsistent.
  """
  coordinator_address = coordinator_address or environ.get("RLPT_COORDINATOR_ADDRESS")
  if num_processes is None:
    num_processes = _env_int(environ, "RLPT_NUM_PROCESSES")
  if process_id is None:
    process_id = _env_int(environ, "RLPT_PROCESS_ID")
  given = {"coordinator_address": coordinator_address, "num_processes": num_processes,
           "process_id": process_id}
  if any(v is not None for v in given.values()):
    missing = [k for k, v in given.items() if v is None]
    if missing:
      raise ValueError(f"Multi-process run needs all of --coordinator_address, --num_processes "
                       f"and --process_id; missing {missing}.")
    if ":" not in coordinator_address:
      raise ValueError(f"--coordinator_address={coordinator_address!r} must be host:port.")
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ValueError(f"--process_id={process_id} must be in [0, {num_processes}) and "
                       f"--num_processes={num_processes} >= 1.")
    return None if num_processes == 1 else given
  if "SLURM_JOB_ID" in environ and (_env_int(environ, "SLURM_NTASKS") or 1) > 1:
    return {}
  if environ.get("TPU_WORKER_HOSTNAMES", "").count(",") >= 1:
    return {}
  return None


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, cpu_collectives: str = "gloo") -> bool:
  """Initializes jax.distributed when the run has several processes.

  Must run before any JAX computation. Returns whether it initialized.
  """
  args = resolve(coordinator_address, num_processes, process_id)
  if args is None:
    return False
  import jax
  if cpu_collectives != "none":
    # The CPU backend has no cross-process collectives unless one is chosen.
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
  jax.distributed.initialize(**args)
  return True


def spans_processes_from_flags() -> bool:
  """Whether the flags (or environment) describe a run of several processes."""
  return resolve(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value) is not None


def initialize_from_flags() -> bool:
  return initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value,
                    _CPU_COLLECTIVES.value)
