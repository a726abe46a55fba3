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
  if len(argv) > 1:
    common.usage_error(f"unexpected arguments {argv[1:]}; every setting is a --flag or --config.<key>=<value>")
  common.quiet_libraries()
  common.pin_cpu_threads()
  common.use_compilation_cache()
  from rlpt.config import PretrainConfig
  from rlpt.pretrain import pretrain
  cfg = common.typed_config(PretrainConfig, _CONFIG.value)
  common.check_domains(cfg)
  common.check_workdir(_WORKDIR.value)
  print(f"Saved {pretrain(cfg, _WORKDIR.value, max_programs=common.max_programs())}")


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("PretrainConfig"))
