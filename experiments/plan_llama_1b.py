"""Memory plan: Llama-3.2-1B-shaped policy + reference + critic on 8 x 80 GiB GPUs.

    python -m launch.plan --config=experiments/plan_llama_1b.py
"""

from experiments._plan_common import plan_config

RUNNER = "plan"


def get_config(arg: str = ""):
  return plan_config("1b", num_devices=8, mesh=dict(fsdp=8), device_memory_gib=80,
                     train_batch=8, seq_len=2048, sample_batch=64, sample_len=2048, arg=arg)
