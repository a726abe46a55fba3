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
  if len(argv) > 1:
    common.usage_error(f"unexpected arguments {argv[1:]}; every setting is a --flag or --config.<key>=<value>")
  common.quiet_libraries()
  common.pin_cpu_threads()
  common.use_compilation_cache()
  from rlpt.config import WarmupConfig
  from rlpt.warmup import warmup
  cfg = common.typed_config(WarmupConfig, _CONFIG.value)
  common.check_domains(cfg)
  common.check_workdir(_WORKDIR.value)
  print(f"Saved {warmup(cfg, _WORKDIR.value, max_programs=common.max_programs())}")


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("WarmupConfig"))
