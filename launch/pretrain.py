r"""Pre-trains a base model on demonstrations.

    python -m launch.pretrain --config=experiments/pretrain_base.py[:smoke] --workdir=runs/base
"""

from absl import app, flags
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", None, "Pre-training config file.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory; the model goes to WORKDIR/model.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  common.run_model_job(argv, "PretrainConfig", "rlpt.pretrain:pretrain", _CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("PretrainConfig"))
