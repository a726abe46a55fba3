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

Every ``--config.x.y`` override is checked against the experiment's keys; the
ConfigDict then becomes a frozen ``TrainConfig`` before anything compiles.
"""

from absl import app, flags
from ml_collections import config_flags

from launch import common, multihost

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where metrics, plots and summaries go.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  common.quiet_libraries()
  multihost.initialize_from_flags()
  import jax
  from rlpt.config import TrainConfig
  from rlpt.trainer import train
  cfg = common.typed_config(TrainConfig, _CONFIG.value)
  result = train(cfg, _WORKDIR.value)
  if jax.process_index() == 0:
    print(result["table"])
    print(f"Curves: {_WORKDIR.value}/eval_success.png  metrics: {_WORKDIR.value}/metrics.jsonl")


if __name__ == "__main__":
  app.run(main)
