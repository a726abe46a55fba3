"""Memory plan: Llama-3.1-8B-shaped policy + reference + critic on 64 x 80 GiB GPUs
(8 nodes of 8: tensor parallel within a node, FSDP across).

    python -m launch.plan --config=experiments/plan_llama_8b.py
"""

from experiments._plan_common import plan_config

RUNNER = "plan"


def get_config(arg: str = ""):
  return plan_config("8b", num_devices=64, mesh=dict(fsdp=16, tensor=4), device_memory_gib=80,
                     train_batch=16, seq_len=4096, sample_batch=256, sample_len=4096, arg=arg,
                     long_context=dict(num_devices=64, mesh=dict(sequence=16, tensor=4),
                                       train_batch=1, sample_batch=16))
