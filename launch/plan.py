r"""Prints the per-device memory of a policy + reference + critic run on a mesh.

    python -m launch.plan --config=experiments/plan_llama_70b.py
    python -m launch.plan --config=experiments/plan_llama_8b.py --config.num_devices=32 \
        --config.mesh.fsdp=8

Nothing is allocated: shapes come from jax.eval_shape on an AbstractMesh, so a
laptop can plan a pod (rlpt.device.memory).
"""

from absl import app
from ml_collections import config_flags

from launch import common

_CONFIG = config_flags.DEFINE_config_file("config", None, "Plan config file.", lock_config=True)


def plan(cfg):
  """rlpt.config.PlanConfig -> rlpt.device.memory.MemoryPlan."""
  from rlpt.device.memory import memory_plan
  return memory_plan(cfg.model, cfg.mesh.as_dict(), cfg.num_devices, cfg.sharding.train_rules,
                     cfg.sharding.sample_rules, train_batch=cfg.train_batch, seq_len=cfg.seq_len,
                     sample_batch=cfg.sample_batch, sample_len=cfg.sample_len,
                     reference=cfg.reference, reference_memory=cfg.sharding.reference_memory,
                     value_model=cfg.value_model, device_memory_gib=cfg.device_memory_gib,
                     logprob_chunk=cfg.logprob_chunk)


def main(argv):
  if len(argv) > 1:
    common.usage_error(f"unexpected arguments {argv[1:]}; every setting is a --flag or --config.<key>=<value>")
  common.quiet_libraries()
  from rlpt.config import PlanConfig
  cfg = common.typed_config(PlanConfig, _CONFIG.value)
  try:
    result = plan(cfg)
  except ValueError as e:
    common.usage_error(f"invalid plan: {e}")
  print(result.table())


if __name__ == "__main__":
  app.run(main, flags_parser=common.flags_parser("PlanConfig"))
