r"""Warms an imported model up on the domains' demonstrations (rlpt.warmup).

    python -m launch.warmup --config=experiments/warmup_hf.py[:smoke] --workdir=runs/warmup
"""

from absl import app, flags
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", None, "Warm-up config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory; the model goes to WORKDIR/model.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  common.run_model_job(argv, "WarmupConfig", "rlpt.warmup:warmup", _CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("WarmupConfig"))
