"""Memory plan: Llama-3.1-70B-shaped policy + reference + critic on a 256-chip
TPU v5p slice (95 GiB HBM per chip): FSDP 32 x tensor 8.

    python -m launch.plan --config=experiments/plan_llama_70b.py
"""

from experiments._plan_common import plan_config

RUNNER = "plan"


def get_config(arg: str = ""):
  return plan_config("70b", num_devices=256, mesh=dict(fsdp=32, tensor=8), device_memory_gib=95,
                     train_batch=32, seq_len=4096, sample_batch=512, sample_len=4096, arg=arg,
                     long_context=dict(num_devices=4096, mesh=dict(fsdp=8, sequence=64, tensor=8),
                                       train_batch=8, sample_batch=16))
