r"""Runs an RL experiment.

    python -m launch.train --config=experiments/grpo_default.py[:smoke] \
        --workdir=runs/NAME [--config.steps=50 --config.rollout.temperature=0.8 ...]

Killed or preempted? Run the same command again: it resumes from the latest
checkpoint in WORKDIR/checkpoints (falling back past a damaged one) and ends
with the same metrics as an uninterrupted run. The final policy is exported
to WORKDIR/export.

Several processes (each runs this same command; only process 0 writes):
``launch/scripts/local.sh``, ``launch/scripts/slurm.sbatch``,
``launch/scripts/tpu_pod.sh``; see launch/multihost.py.

On a CPU host ``--cpu_devices=0`` runs one single-threaded XLA device per
core (as many as the batch divides into) with the batch sharded over them,
which is faster for small models than the default one device splitting each
op across the cores. A run's numbers then differ in the last bits (sums are
taken in another order), so a base pre-trained under it is another base.

Every ``--config.x.y`` override is checked against the experiment's keys; the
ConfigDict then becomes a frozen ``TrainConfig`` before anything compiles.
"""

import math
import os

from absl import app, flags
from ml_collections import config_flags

from launch import common, multihost

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics, plots and summaries go.")
_CPU_DEVICES = flags.DEFINE_integer(
    "cpu_devices", 1, "On a CPU host: this many XLA devices of one thread each, the batch "
    "sharded over them, instead of one device splitting every op over the cores (1, the "
    "default). 0: one per core, as many as divide the prompts per step and the minibatch, "
    "unless XLA_FLAGS already sets a device count or the run spans several processes. "
    "Accelerators are unaffected.", lower_bound=0)
flags.mark_flags_as_required(["config", "workdir"])


def _cpu_devices(cfg) -> int:
  """--cpu_devices, with 0 resolved to one per available core that the batch
  divides into (1 when XLA_FLAGS sets the count or the run spans processes)."""
  if _CPU_DEVICES.value:
    return _CPU_DEVICES.value
  if ("xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
      or multihost.spans_processes_from_flags()):
    return 1
  return math.gcd(len(os.sched_getaffinity(0)), cfg.rollout.prompts_per_step,
                  cfg.rollout.batch_size // cfg.rl.minibatches)


def main(argv):
  if len(argv) > 1:
    common.usage_error(f"unexpected arguments {argv[1:]}; every setting is a --flag or --config.<key>=<value>")
  common.quiet_libraries()
  from rlpt.config import TrainConfig
  from rlpt.device import set_cpu_devices
  cfg = common.typed_config(TrainConfig, _CONFIG.value)
  common.check_domains(cfg)
  common.check_workdir(_WORKDIR.value)
  try:
    set_cpu_devices(_cpu_devices(cfg))
  except (ValueError, RuntimeError) as e:
    common.usage_error(f"--cpu_devices={_CPU_DEVICES.value}: {e}")
  common.pin_cpu_threads()
  common.use_compilation_cache()
  ray_started = False
  if cfg.env.backend == "ray":  # before JAX's threads exist: Ray starts its processes by fork + exec
    from rlpt.rollout.ray_backend import start_ray
    ray_started = start_ray(cfg.env.ray_address, cfg.env.ray_actors)
  multihost.initialize_from_flags()
  import jax
  from rlpt.trainer import train
  if jax.process_index() == 0:
    threads = os.environ.get("PJRT_NPROC")
    print(f"devices: {jax.device_count()} x {jax.devices()[0].platform} in "
          f"{jax.process_count()} process(es)"
          + (f", {threads} XLA CPU threads" if threads else ""), flush=True)
  try:
    result = train(cfg, _WORKDIR.value, max_programs=common.max_programs())
  finally:
    if ray_started:
      import ray
      ray.shutdown()
  if jax.process_index() == 0:
    print(result["table"])
    print(f"Curves: {_WORKDIR.value}/eval_success.png  metrics: {_WORKDIR.value}/metrics.jsonl")


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("TrainConfig"))
